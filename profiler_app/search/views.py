"""Config search pages: thin views over `creating`, `runner`, `reading`, `applying` and
`report`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from common.negotiation import wants_json
from registry import server_access
from registry.server_context import server_of
from registry.servers import Server
from repository_app.control import CONTROL_PERMISSION
from team import audit

from .. import kind_presets, sweeps
from ..engine.loadgen import SweepError
from ..models import Search
from ..permissions import (
    can_manage_sweep,
    can_run,
    management_refusal,
    owner_note,
    run_refusal,
    sweep_server,
    visible_or_404,
)
from ..views import download, snapshot_or_404
from . import applying, creating, defaults, reading, report, runner, target
from .errors import SearchError
from .forms import SearchForm
from .space import knobs_of


def _apply_refusal(request: HttpRequest, server: Server) -> str:
    """Applying a candidate saves config.pbtxt (the repository, for every server on it)
    and reloads: the control permission on each."""
    return server_access.repository_refusal(
        request.user, CONTROL_PERMISSION, server, "your role cannot apply configs"
    )


def _search_or_404(request: HttpRequest, pk: int, rows: Any = None) -> Search:
    """The search, unless there is none or its server is hidden from the user."""
    search = get_object_or_404(
        Search.objects.select_related("sweep") if rows is None else rows, pk=pk
    )
    visible_or_404(request.user, search.sweep, "search")
    return search


def _run_refusal(request: HttpRequest, server: Server) -> str:
    return run_refusal(request.user, server, "your role cannot run or cancel searches")


@login_required
@require_http_methods(["GET", "POST"])
def search_new(request: HttpRequest, name: str) -> HttpResponse:
    server = server_of(request)
    refused = run_refusal(request.user, server, "Your role cannot run config searches")
    try:
        base, _, sha = target.saved_config(server, name)
    except SearchError as exc:
        raise Http404(str(exc)) from None
    current = knobs_of(base)
    kind, _ = kind_presets.model_kind(server, name)
    initial, capacity, suggestion, gpus = SearchForm.defaults_for(server, name, current, sha)
    if request.method == "POST":
        if refused:
            return render(request, "403.html", {"exception": f"{refused}."}, status=403)
        form = SearchForm(request.POST, model=name, server=server, kind=kind)
        if form.is_valid() and form.search_request is not None:
            try:
                search = creating.create_search(form.search_request, user=request.user)
            except SearchError as exc:
                form.add_error(None, str(exc))
            else:
                return redirect("search_detail", pk=search.pk)
    else:
        form = SearchForm(initial=initial, model=name, server=server, kind=kind)
    return render(
        request,
        "profiler/search_new.html",
        {
            "form": form,
            "name": name,
            "can_run": not refused,
            "current": current,
            "kind": kind,
            "gpus": gpus,
            "capacity": capacity.describe("KIND_GPU" if gpus else "KIND_CPU"),
            "suggestion": suggestion.sentence()
            if suggestion
            else defaults.without_suggestion(server, name, sha),
            "probe": defaults.running_probe(server, name),
            "history": Search.objects.filter(model=name, sweep__server=server.name).select_related(
                "sweep"
            )[:10],
        },
    )


@login_required
@require_GET
def search_detail(request: HttpRequest, pk: int) -> HttpResponse:
    search = _search_or_404(request, pk)
    server = sweep_server(search.sweep)
    return render(
        request,
        "profiler/search_detail.html",
        {
            "search": search,
            "data": reading.snapshot(pk),
            "can_run": can_run(request.user, server),
            "can_manage": can_manage_sweep(request.user, search.sweep),
            "owner_note": owner_note(search.sweep, "search"),
            "can_apply": not _apply_refusal(request, server),
        },
    )


@login_required
@require_GET
def search_data(request: HttpRequest, pk: int) -> JsonResponse:
    _search_or_404(request, pk)
    return snapshot_or_404(reading.snapshot(pk), "no such search")


def _action(
    request: HttpRequest,
    pk: int,
    run: Callable[[Search], str],
    refusal: Callable[[Server], str],
    action: str = "",
) -> HttpResponse:
    """One action on a search, checked on the search's server (``refusal``: why not)."""
    search = _search_or_404(request, pk, Search.objects.select_related("sweep__created_by"))
    if message := refusal(sweep_server(search.sweep)):
        return JsonResponse({"message": message}, status=403)
    if action and (  # cancel, resume
        message := management_refusal(
            request.user, search.sweep, action, target=f"search #{pk}", noun="search"
        )
    ):
        return JsonResponse({"message": message}, status=403)
    try:
        message = run(search)
    except SearchError as exc:
        if wants_json(request):
            return JsonResponse({"message": str(exc)}, status=409)
        messages.error(request, str(exc))
        return redirect("search_detail", pk=pk)
    if action:
        audit.record(
            request.user,
            action,
            model_name=search.model,
            server=search.sweep.server,
            target=f"search #{pk}",
        )
    if wants_json(request):
        return JsonResponse({"message": message})
    messages.success(request, message)
    return redirect("search_detail", pk=pk)


@login_required
@require_POST
def search_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, runner.cancel, lambda s: _run_refusal(request, s), "search.cancel")


@login_required
@require_POST
def search_resume(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, runner.resume, lambda s: _run_refusal(request, s), "search.resume")


@login_required
@require_POST
def search_apply(request: HttpRequest, pk: int) -> HttpResponse:
    key = request.POST.get("key", "")
    return _action(
        request,
        pk,
        lambda s: applying.apply_candidate(s, key, request.user),
        lambda server: _apply_refusal(request, server),
    )


@login_required
@require_GET
def search_report(request: HttpRequest, pk: int) -> HttpResponse:
    search = _search_or_404(request, pk)
    html = report.build(search)
    return download(html, "text/html; charset=utf-8", f"config-search-{pk}-{search.model}.html")


@login_required
@require_GET
def search_candidate_config(request: HttpRequest, pk: int) -> HttpResponse:
    search = _search_or_404(request, pk)
    try:
        text = applying.candidate_config_text(search, request.GET.get("key", ""))
    except Exception as exc:  # noqa: BLE001 - unknown key or unreadable config: 404
        raise Http404(str(exc)) from None
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


@login_required
@require_POST
def search_probe(request: HttpRequest, name: str) -> HttpResponse:
    """Queue a short sweep of the current config (`defaults.probe_params`), whose knee and
    latency give the search form its budget and concurrency range."""
    server = server_of(request)
    if refused := run_refusal(request.user, server, "your role cannot run sweeps"):
        return JsonResponse({"message": refused}, status=403)
    running = defaults.running_probe(server, name)
    if running is not None:
        return JsonResponse({"message": "A probe is already queued.", "sweep": running.pk})
    kind, _ = kind_presets.model_kind(server, name)
    params = defaults.probe_params(name, streaming=bool(kind and kind.decoupled))
    try:
        sweeps.preflight(server, params)
        probe = sweeps.create_sweep(
            server,
            params,
            user=request.user,
            name=defaults.PROBE_NAME,
            note="A short sweep of the current config: Find best config takes its budget "
            "and concurrency range from it.",
        )
    except SweepError as exc:
        return JsonResponse({"message": str(exc)}, status=409)
    return JsonResponse({"message": f"Probe queued as sweep #{probe.pk}.", "sweep": probe.pk})


@login_required
@require_GET
def search_defaults(request: HttpRequest, name: str) -> JsonResponse:
    """The form's defaults now (after a probe finished): values and the probe's sentence."""
    server = server_of(request)
    try:
        base, _, sha = target.saved_config(server, name)
    except SearchError as exc:
        raise Http404(str(exc)) from None
    initial, capacity, suggestion, gpus = SearchForm.defaults_for(server, name, knobs_of(base), sha)
    return JsonResponse(
        {
            "initial": {k: v for k, v in initial.items() if not isinstance(v, bool)},
            "suggestion": suggestion.sentence() if suggestion else "",
            "capacity": capacity.describe("KIND_GPU" if gpus else "KIND_CPU"),
        }
    )
