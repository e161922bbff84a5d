"""Sweep pages: thin views over `sweeps`, `jobs` and `export`; GET handlers only read."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from common.negotiation import wants_json
from jobs import queues
from registry.server_context import server_of
from registry.servers import all as all_servers
from repository_app.naming import is_safe_model_name, unsafe_name_message
from team import audit

from . import (
    export,
    jobs,
    kind_presets,
    kind_rules,
    llm,
    measure,
    sweep_read,
    sweep_report,
    sweeps,
)
from .engine.loadgen import SweepError
from .engine.perf_analyzer_csv import step_columns
from .forms import SweepForm, SweepLabelForm
from .models import Search, Sweep
from .permissions import (
    CANNOT_RUN,
    can_manage_sweep,
    can_run,
    hidden_servers,
    management_refusal,
    owner_note,
    run_refusal,
    sweep_server,
    visible_or_404,
)


def _sweep_or_404(request: HttpRequest, pk: int, rows: Any = None) -> Sweep:
    """The sweep, unless there is none or its server is hidden from the user."""
    sweep = get_object_or_404(Sweep.objects.all() if rows is None else rows, pk=pk)
    return visible_or_404(request.user, sweep)


def _sweep_or_search(request: HttpRequest, pk: int, search_view: str) -> Sweep | HttpResponse:
    """The sweep; or, for a config search's own job, a redirect to the search's
    ``search_view`` (its page or its report are the search's)."""
    sweep = _sweep_or_404(request, pk, Sweep.objects.select_related("created_by", "search"))
    if sweep.kind == Sweep.Kind.SEARCH:
        return redirect(search_view, pk=sweep.search.pk)
    return sweep


def download(content: str, content_type: str, filename: str) -> HttpResponse:
    """`content` offered as a download named `filename`, escaped (quotes, CR/LF and
    non-ASCII characters in a model name cannot break or add headers)."""
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


def snapshot_or_404(data: dict[str, Any] | None, missing: str) -> JsonResponse:
    """A sweep's or a search's snapshot, what its page resyncs from; 404 (``missing``) when
    it went between the visibility check and the read."""
    if data is None:
        raise Http404(missing)
    return JsonResponse(data)


@login_required
@require_GET
def sweep_list(request: HttpRequest) -> HttpResponse:
    """Every server's sweeps and queues (each row says its server when there are several)."""
    model = request.GET.get("model", "")
    hidden = hidden_servers(request.user)  # servers narrowed to none: as if they were not
    jobs_seen = Sweep.objects.exclude(server__in=hidden)
    rows = jobs_seen.filter(kind=Sweep.Kind.SWEEP).select_related("created_by")
    if model:
        rows = rows.filter(model=model)
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    seen = queues.current(wait=False)  # a page never waits for the workers' answer
    searches = Search.objects.exclude(sweep__server__in=hidden).select_related(
        "sweep", "sweep__created_by"
    )
    if model:
        searches = searches.filter(model=model)
    return render(
        request,
        "profiler/sweep_list.html",
        {
            "page": page,
            "model": model,
            "server_queues": _server_queues(seen, hidden),
            "workers_unknown": seen.error,
            "searches": searches[:20],
        },
    )


def _server_queues(seen: queues.Consumers, hidden: set[str]) -> list[dict[str, Any]]:
    """Per server: its running job, its queued ones (in order, whatever their kind), and
    where its next job would go, from what the workers last said (`seen`); none of the
    servers `hidden` from the reader."""
    active = Sweep.objects.filter(state__in=(Sweep.State.RUNNING, Sweep.State.QUEUED)).exclude(
        server__in=hidden
    )
    jobs_of: dict[str, list[Sweep]] = {}
    for job in active.order_by("queued_at", "id"):
        jobs_of.setdefault(job.server, []).append(job)
    known = {s.name: s for s in all_servers() if s.name not in hidden}
    rows = []
    for name in [*known, *sorted(set(jobs_of) - set(known))]:  # removed servers' jobs too
        found = jobs_of.get(name, [])
        for job in found:
            job.position = jobs.queue_position(job)
        server = known.get(name)
        rows.append(
            {
                "server": name,
                "queue": queues.queue_name(name),
                "route": queues.queue_for(server, seen) if server else None,
                "running": [j for j in found if j.state == Sweep.State.RUNNING],
                "queued": [j for j in found if j.state == Sweep.State.QUEUED],
            }
        )
    return rows


@login_required
@require_http_methods(["GET", "POST"])
def sweep_new(request: HttpRequest, name: str) -> HttpResponse:
    if not is_safe_model_name(name):  # such a folder has no page anywhere (naming.py)
        raise Http404(unsafe_name_message(name))
    server = server_of(request)
    refused = run_refusal(request.user, server, "Your role cannot run sweeps")
    status = 200
    if request.method == "POST" and refused:
        return render(request, "403.html", {"exception": f"{refused}."}, status=403)
    kind, kind_source = kind_presets.model_kind(server, name)
    if request.method == "POST":
        form = SweepForm(request.POST, request.FILES, model=name, kind=kind)
        if form.is_valid() and form.params is not None:
            try:
                sweep = sweeps.start_sweep(server, form.params, request.user, **form.start_kwargs)
            except sweeps.SweepRefused as exc:  # the preflight's: on the fields it names
                form.add_refusal(exc)
            except jobs.QueueUnavailable as exc:
                form.add_error(None, str(exc))
                status = 503
            else:
                return redirect("sweep_detail", pk=sweep.pk)
    else:
        preset = request.GET.get("preset", "default")
        initial = SweepForm.preset_initial(preset, kind)
        inputs = request.GET.get("inputs", "")
        document = llm.preset_text(inputs)
        if document is not None:  # an LLM input preset: JSON text the user edits
            initial.update(input_data="text", input_data_text=document)
        elif request.GET.get("input_data"):  # a tried request's ("use as benchmark input")
            initial.update(input_data="text", input_data_text=request.GET["input_data"])
        form = SweepForm(initial=initial, model=name, kind=kind)
    history = Sweep.objects.filter(model=name, kind=Sweep.Kind.SWEEP, server=server.name)[:10]
    return render(
        request,
        "profiler/sweep_new.html",
        {
            "form": form,
            "name": name,
            "can_run": not refused,
            "presets": kind_presets.presets_for(kind),
            "preset": request.GET.get("preset", "default"),
            "input_presets": {k: label for k, (label, _) in llm.INPUT_PRESETS.items()},
            "kind": kind,
            "kind_source": kind_source,
            "history": history,
        },
        status=status,
    )


@login_required
@require_GET
def sweep_detail(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = _sweep_or_search(request, pk, "search_detail")
    if isinstance(sweep, HttpResponse):
        return sweep
    data = sweep_read.snapshot(pk)
    params = sweeps.params_of(sweep)  # as a re-run would use them
    return render(
        request,
        "profiler/sweep_detail.html",
        {
            "sweep": sweep,
            "params": params,
            "notes": kind_rules.notes(params, sweep.model_kind),
            # The built-in engine measures a sequence model's requests by position.
            "position_charts": sweep.sequence and sweep.engine == Sweep.Engine.BUILTIN,
            "data": data,
            "can_run": can_run(request.user, sweep_server(sweep)),
            "can_manage": can_manage_sweep(request.user, sweep),
            "owner_note": owner_note(sweep),
            "position": jobs.queue_position(sweep),
            "history": Sweep.objects.filter(model=sweep.model, kind=Sweep.Kind.SWEEP)
            .exclude(pk=pk)
            .exclude(server__in=hidden_servers(request.user))[:10],
            # An ensemble's or a BLS model's steps so far: their charts (sweep_steps.js)
            "step_labels": [label for label, _ in step_columns(_level_rows(data))],
            # The bins of the windows' inter-response histograms (counts only are stored).
            "histogram_edges_us": list(measure.INTER_RESPONSE_EDGES_US),
        },
    )


def _level_rows(data: dict[str, Any] | None) -> list[dict[str, Any]]:
    points = (data or {}).get("points") or []
    return sorted((p for p in points if p.get("window") == -1), key=lambda p: p["level"])


@login_required
@require_GET
def sweep_data(request: HttpRequest, pk: int) -> JsonResponse:
    """All points so far, the sweep and the group's seq: what a client resyncs from."""
    _sweep_or_404(request, pk)
    return snapshot_or_404(sweep_read.snapshot(pk), "no such sweep")


def _action(request: HttpRequest, pk: int, run, action: str = "") -> HttpResponse:  # type: ignore[no-untyped-def]
    """Run one user action; `action` (cancel, resume) also needs the sweep's owner or an
    admin, and is audited, refusals included. The role is checked on the sweep's server."""
    sweep = _sweep_or_404(request, pk, Sweep.objects.select_related("created_by"))
    if refused := run_refusal(request.user, sweep_server(sweep), CANNOT_RUN):
        return JsonResponse({"message": refused}, status=403)
    if action and (
        message := management_refusal(request.user, sweep, action, target=f"sweep #{pk}")
    ):
        return JsonResponse({"message": message}, status=403)
    try:
        message, target = run()
        if action:
            audit.record(
                request.user,
                action,
                model_name=sweep.model,
                server=sweep.server,
                target=f"sweep #{pk}",
            )
    except (SweepError, jobs.JobError) as exc:
        if wants_json(request):
            return JsonResponse({"message": str(exc)}, status=409)
        messages.error(request, str(exc))
        return redirect("sweep_detail", pk=pk)
    if wants_json(request):
        return JsonResponse({"message": message, "sweep": target})
    messages.success(request, message)
    return redirect("sweep_detail", pk=target)


@login_required
@require_POST
def sweep_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, lambda: (jobs.cancel(pk), pk), "sweep.cancel")


@login_required
@require_POST
def sweep_resume(request: HttpRequest, pk: int) -> HttpResponse:
    def run() -> tuple[str, int]:
        sweep = jobs.resume(pk)
        return f"Sweep #{sweep.pk} queued again: it measures the missing levels.", sweep.pk

    return _action(request, pk, run, "sweep.resume")


@login_required
@require_POST
def sweep_rerun(request: HttpRequest, pk: int) -> HttpResponse:
    def run() -> tuple[str, int]:
        sweep = sweeps.rerun(pk, request.user)
        return f"Sweep #{sweep.pk} queued with the same parameters.", sweep.pk

    return _action(request, pk, run)


@login_required
@require_POST
def sweep_label(request: HttpRequest, pk: int) -> HttpResponse:
    """Set a sweep's name and note: its owner or an admin (a label changes no measurement,
    so it is not audited)."""
    sweep = _sweep_or_404(request, pk, Sweep.objects.select_related("created_by"))
    if not can_manage_sweep(request.user, sweep):
        return JsonResponse(
            {"message": "only the user who started the sweep, or an Admin, can label it"},
            status=403,
        )
    form = SweepLabelForm(request.POST)
    if not form.is_valid():
        text = "; ".join(m for errors in form.errors.values() for m in errors)
        if wants_json(request):
            return JsonResponse({"message": text}, status=400)
        messages.error(request, text)
        return redirect("sweep_detail", pk=pk)
    sweeps.set_label(pk, form.cleaned_data["name"], form.cleaned_data["note"])
    if wants_json(request):
        return JsonResponse({"message": "Name and note saved.", "sweep": pk})
    messages.success(request, "Name and note saved.")
    return redirect("sweep_detail", pk=pk)


@login_required
@require_GET
def sweep_csv(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = _sweep_or_404(request, pk)
    return download(export.to_csv(sweep), "text/csv", f"sweep-{pk}-{sweep.model}.csv")


@login_required
@require_GET
def sweep_json_export(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = _sweep_or_404(request, pk)
    document = json.dumps(export.to_json(sweep), indent=2)
    return download(document, "application/json", f"sweep-{pk}-{sweep.model}.json")


@login_required
@require_GET
def sweep_report_html(request: HttpRequest, pk: int) -> HttpResponse:
    """The sweep as one self-contained HTML file (`sweep_report`), offered as a download."""
    sweep = _sweep_or_search(request, pk, "search_report")
    if isinstance(sweep, HttpResponse):
        return sweep
    page = sweep_report.build(sweep)
    return download(page, "text/html; charset=utf-8", f"sweep-{pk}-{sweep.model}.html")


@login_required
@require_GET
def sweep_compare(request: HttpRequest) -> HttpResponse:
    # Whole numbers a primary key can hold; anything else ('²', 10^23) names no sweep.
    ids = [
        int(i) for i in request.GET.getlist("ids") if i.isascii() and i.isdigit() and len(i) < 19
    ]
    seen = Sweep.objects.exclude(server__in=hidden_servers(request.user))
    found = {s.pk: s for s in seen.filter(pk__in=ids)}
    chosen = [found[i] for i in dict.fromkeys(ids) if i in found]
    if len(chosen) < 2:
        messages.error(request, "Pick two or more sweeps to compare.")
        return redirect("sweep_list")
    data = export.compare(chosen)
    ordered = sorted(chosen, key=lambda s: (s.created_at, s.pk))  # old -> new, as `data`
    return render(request, "profiler/sweep_compare.html", {"data": data, "chosen": ordered})
