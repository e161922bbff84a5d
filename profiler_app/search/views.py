"""Config search pages: thin views over `runner` and `report`."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from repository_app.server_context import server_of
from repository_app.views import CONTROL_PERMISSION
from team import audit

from .. import kind_presets, sweeps
from ..engine.loadgen import SweepError
from ..models import Search
from ..permissions import RUN_PERMISSION, can_manage_sweep, management_refusal, owner_note
from ..views import download
from . import defaults, report, runner
from .forms import SearchForm
from .space import knobs_of


def _can_run(request: HttpRequest) -> bool:
    return request.user.has_perm(RUN_PERMISSION)


def _can_apply(request: HttpRequest) -> bool:
    return request.user.has_perm(CONTROL_PERMISSION)


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


@login_required
@require_http_methods(["GET", "POST"])
def search_new(request: HttpRequest, name: str) -> HttpResponse:
    can_run = _can_run(request)
    server = server_of(request)
    try:
        base, _, sha = runner.saved_config(server, name)
    except runner.SearchError as exc:
        raise Http404(str(exc)) from None
    current = knobs_of(base)
    kind, _ = kind_presets.model_kind(server, name)
    initial, capacity, suggestion, gpus = SearchForm.defaults_for(server, name, current, sha)
    if request.method == "POST":
        if not can_run:
            return render(
                request,
                "403.html",
                {"exception": "Your role cannot run config searches."},
                status=403,
            )
        form = SearchForm(request.POST, model=name, server=server, kind=kind)
        if form.is_valid() and form.search_request is not None:
            try:
                search = runner.create_search(form.search_request, user=request.user)
            except runner.SearchError as exc:
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
            "can_run": can_run,
            "current": current,
            "kind": kind,
            "gpus": gpus,
            "capacity": capacity.describe("KIND_GPU" if gpus else "KIND_CPU"),
            "suggestion": suggestion.sentence() if suggestion else "",
            "probe": defaults.running_probe(server, name),
            "history": Search.objects.filter(model=name, sweep__server=server.name).select_related(
                "sweep"
            )[:10],
        },
    )


@login_required
@require_GET
def search_detail(request: HttpRequest, pk: int) -> HttpResponse:
    search = get_object_or_404(Search.objects.select_related("sweep"), pk=pk)
    return render(
        request,
        "profiler/search_detail.html",
        {
            "search": search,
            "data": runner.snapshot(pk),
            "can_run": _can_run(request),
            "can_manage": can_manage_sweep(request.user, search.sweep),
            "owner_note": owner_note(search.sweep, "search"),
            "can_apply": _can_apply(request),
        },
    )


@login_required
@require_GET
def search_data(request: HttpRequest, pk: int) -> JsonResponse:
    data = runner.snapshot(pk)
    if data is None:
        raise Http404("no such search")
    return JsonResponse(data)


def _action(
    request: HttpRequest, pk: int, run: Callable[[Search], str], allowed: bool, action: str = ""
) -> HttpResponse:
    search = get_object_or_404(Search.objects.select_related("sweep__created_by"), pk=pk)
    if not allowed:
        message = "your role cannot do this"
        return JsonResponse({"message": message}, status=403)
    if action and (  # cancel, resume
        message := management_refusal(
            request.user, search.sweep, action, target=f"search #{pk}", noun="search"
        )
    ):
        return JsonResponse({"message": message}, status=403)
    try:
        message = run(search)
    except runner.SearchError as exc:
        if _wants_json(request):
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
    if _wants_json(request):
        return JsonResponse({"message": message})
    messages.success(request, message)
    return redirect("search_detail", pk=pk)


@login_required
@require_POST
def search_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, runner.cancel, _can_run(request), "search.cancel")


@login_required
@require_POST
def search_resume(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, runner.resume, _can_run(request), "search.resume")


@login_required
@require_POST
def search_apply(request: HttpRequest, pk: int) -> HttpResponse:
    key = request.POST.get("key", "")
    return _action(
        request, pk, lambda s: runner.apply_candidate(s, key, request.user), _can_apply(request)
    )


@login_required
@require_GET
def search_report(request: HttpRequest, pk: int) -> HttpResponse:
    search = get_object_or_404(Search.objects.select_related("sweep"), pk=pk)
    html = report.build(search)
    return download(html, "text/html; charset=utf-8", f"config-search-{pk}-{search.model}.html")


@login_required
@require_GET
def search_candidate_config(request: HttpRequest, pk: int) -> HttpResponse:
    search = get_object_or_404(Search, pk=pk)
    try:
        text = runner.candidate_config_text(search, request.GET.get("key", ""))
    except Exception as exc:  # noqa: BLE001 - unknown key or unreadable config: 404
        raise Http404(str(exc)) from None
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


@login_required
@require_POST
def search_probe(request: HttpRequest, name: str) -> HttpResponse:
    """Queue a short sweep of the current config (`defaults.probe_params`), whose knee and
    latency give the search form its budget and concurrency range."""
    if not _can_run(request):
        return JsonResponse({"message": "your role cannot run sweeps"}, status=403)
    server = server_of(request)
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
        base, _, sha = runner.saved_config(server, name)
    except runner.SearchError as exc:
        raise Http404(str(exc)) from None
    initial, capacity, suggestion, gpus = SearchForm.defaults_for(server, name, knobs_of(base), sha)
    return JsonResponse(
        {
            "initial": {k: v for k, v in initial.items() if not isinstance(v, bool)},
            "suggestion": suggestion.sentence() if suggestion else "",
            "capacity": capacity.describe("KIND_GPU" if gpus else "KIND_CPU"),
        }
    )
