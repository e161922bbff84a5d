"""Repository pages: thin views over the disk module, the status merge and the control module,
each about the server the request names (``server_context.server_of``): its repository on
disk, its Triton, its states and history."""

from __future__ import annotations

import time
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from common.negotiation import wants_json
from registry import reachability, server_access
from registry.server_context import server_of
from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import ModelState, ServerInfo, TritonError
from triton_api.statistics import derive_server_metrics, summarize_all

from . import control, events, history, repository
from .control import CANNOT_CONTROL, CONTROL_PERMISSION
from .served import served_config, version_notes
from .status import STATE_CHOICES, filter_and_sort, group_index, merge, state_json, unknown_json

RUN_PERMISSION = "profiler_app.run_sweeps"
CANNOT_RUN = "your role cannot run sweeps or searches (Operators and Admins can)"


def _triton_index(server: Server) -> tuple[list[ModelState] | None, str]:
    try:
        return get_client(server).repository_index(), ""
    except TritonError as exc:
        return None, exc.message


def _unknown(server: Server, error: str) -> str:
    """What a model's state reads while the server does not answer."""
    return str(reachability.down_json(server.name, error)["reason"]) if error else ""


def _server_info(server: Server) -> tuple[ServerInfo | None, str]:
    try:
        return get_client(server).server_info(), ""
    except TritonError as exc:
        return None, exc.message


def _control_disabled_reason(
    request: HttpRequest, server: Server, info: ServerInfo | None, error: str
) -> str:
    refused = server_access.refusal(request.user, CONTROL_PERMISSION, server, CANNOT_CONTROL)
    if refused:
        return refused
    if info is None:
        return error
    if not info.explicit:
        return control.NOT_EXPLICIT
    return ""


@login_required
@require_GET
def model_list(request: HttpRequest) -> HttpResponse:
    server = server_of(request)
    index, triton_error = _triton_index(server)
    rows = merge(repository.scan(server.repository), index)
    query = request.GET.get("q", "")
    state = request.GET.get("state", "")
    sort = request.GET.get("sort", "name")
    desc = request.GET.get("dir") == "desc"
    shown = filter_and_sort(rows, query, state, sort, desc)
    restore = []
    if index is not None:
        restore = control.models_to_restore(server, {r.name: r.state for r in rows})
    last = control.last_outcomes(server, [r.name for r in shown])
    for row in shown:
        row.last = last.get(row.name)  # type: ignore[attr-defined]
    return render(
        request,
        "repository/model_list.html",
        {
            "rows": shown,
            "unknown": _unknown(server, triton_error),
            "total": len(rows),
            "query": query,
            "state": state,
            "sort": sort,
            "desc": desc,
            "states": STATE_CHOICES,
            "triton_error": triton_error,
            "triton_url": server.grpc_url,
            "restore": restore,
            "can_control": request.user.has_perm(CONTROL_PERMISSION, server),
        },
    )


@login_required
@require_GET
def states_json(request: HttpRequest) -> JsonResponse:
    """The current state of every model of the server, for clients that resync after a gap."""
    server = server_of(request)
    seq = events.current_seq(events.repository_group(server.name))
    try:
        index = get_client(server).repository_index()
        triton: dict[str, object] = {"up": True, "message": ""}
    except TritonError as exc:
        index, triton = [], reachability.down_json(server.name, exc.message)
    models = {name: state_json(s) for name, s in group_index(index).items()}
    return JsonResponse({"seq": seq, "triton": triton, "models": models})


@login_required
@require_GET
def model_detail(request: HttpRequest, name: str) -> HttpResponse:
    server = server_of(request)
    try:
        folder = repository.get_model(server.repository, name)
    except repository.RepositoryError as exc:
        folder = None
        missing_reason = str(exc)
    index, triton_error = _triton_index(server)
    states = group_index(index or []).get(name, [])
    if folder is None and not states:
        raise Http404(missing_reason)
    info, info_error = _server_info(server) if index is not None else (None, triton_error)
    stats: list[dict[str, object]] = []
    served = None
    if index is not None:
        try:
            stats = summarize_all(get_client(server).model_statistics(name)).get(name, [])
        except TritonError:
            stats = []
        served = served_config(
            server, name, folder.config if folder else None, folder.path if folder else None
        )
    versions = repository.version_folders(folder) if folder else []
    for version in versions:
        for model_file in version.files:
            if not model_file.outside:
                model_file.sha256 = repository.sha256_of(model_file.path, server.repository)
    notes = version_notes(
        folder.config if folder else None,
        folder.versions if folder else [],
        {s.version: (s.state, s.reason) for s in states if s.version},
    )
    for version in versions:
        version.tone, version.note = notes.get(version.number, ("neutral", ""))  # type: ignore[attr-defined]
    state = (
        state_json(states) if index is not None else unknown_json(_unknown(server, triton_error))
    )
    return render(
        request,
        "repository/model_detail.html",
        {
            "name": name,
            "folder": folder,
            "overview": repository.config_overview(folder.config)
            if folder and folder.config
            else None,
            "versions": sorted(versions, key=lambda v: v.number, reverse=True),
            "states": state,
            "served": served,
            "last": control.last_outcomes(server, [name]).get(name),
            "running": control.running(server, name),
            "stats": stats,
            "triton_error": triton_error,
            "control_disabled": _control_disabled_reason(request, server, info, info_error),
            "run_disabled": server_access.refusal(request.user, RUN_PERMISSION, server, CANNOT_RUN),
            # Named by the confirmation before an unload: Triton unloads them too.
            "dependants": repository.dependants(Path(server.repository), name),
        },
    )


@login_required
@require_GET
def model_stats_json(request: HttpRequest, name: str) -> JsonResponse:
    server = server_of(request)
    try:
        stats = summarize_all(get_client(server).model_statistics(name)).get(name, [])
    except TritonError as exc:
        return JsonResponse({"error": exc.message}, status=503)
    return JsonResponse({"model": name, "stats": stats})


@login_required
@require_POST
def model_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    server = server_of(request)
    refused = server_access.refusal(request.user, CONTROL_PERMISSION, server, CANNOT_CONTROL)
    if refused:
        message, status = refused, 403
    else:
        try:
            repository.check_model_name(name)
            if not control.model_exists(server, name):
                raise Http404(f"no model '{name}' on disk or in Triton")
            control.start_action(
                server, action, name, request.user.get_username(), user_id=request.user.pk
            )
            message, status = f"{action} of {name} started", 202
        except (control.ActionRefused, repository.RepositoryError) as exc:
            message, status = str(exc), 409
    if wants_json(request):
        return JsonResponse({"message": message, "ok": status == 202}, status=status)
    # Started: the model page says so while it runs, and its outcome replaces that (a
    # message here would stay beside the outcome).
    if status != 202:
        messages.error(request, message)
    return redirect(reverse("model_detail", args=[name]))


@login_required
@require_POST
def restore_loads(request: HttpRequest) -> HttpResponse:
    server = server_of(request)
    denied = server_access.refusal(request.user, CONTROL_PERMISSION, server, CANNOT_CONTROL)
    if denied:
        messages.error(request, denied)
        return redirect("model_list")
    index, error = _triton_index(server)
    if index is None:
        messages.error(request, error)
        return redirect("model_list")
    current = {n: state_json(s)["state"] for n, s in group_index(index).items()}
    started, refused = [], []
    for name in control.models_to_restore(server, current):
        try:
            control.start_action(
                server, "load", name, request.user.get_username(), user_id=request.user.pk
            )
            started.append(name)
        except control.ActionRefused as exc:
            refused.append(f"{name}: {exc}")
    if started:
        messages.info(request, f"Loading again: {', '.join(started)}")
    for line in refused:
        messages.error(request, line)
    return redirect("model_list")


@login_required
@require_GET
def server(request: HttpRequest) -> HttpResponse:
    triton = server_of(request)
    info, error = _server_info(triton)
    metrics = None
    if info is not None:
        try:
            metrics = derive_server_metrics(None, get_client(triton).metrics(), 0)
        except TritonError as exc:
            error = exc.message
    chosen = request.GET.get("range", "1h")
    if chosen not in history.RANGES:
        chosen = "1h"
    return render(
        request,
        "repository/server.html",
        {
            "info": info,
            "error": error,
            "metrics": metrics,
            "triton_url": triton.grpc_url,
            "metrics_url": triton.metrics_url,
            "triton_server": triton,
            "ranges": list(history.RANGES),
            "range": chosen,
            "history_enabled": settings.HISTORY_ENABLED,
            "fine_hours": settings.HISTORY_FINE_RETENTION_H,
            "retention_days": settings.HISTORY_RETENTION_DAYS,
            "chart_config": {
                "historyUrl": reverse("server_history_json"),  # servers.js adds server=
                "range": chosen,
                "spans": history.RANGES,
            },
        },
    )


@login_required
@require_GET
def server_history_json(request: HttpRequest) -> JsonResponse:
    """The stored metrics history of one range (?range=live|1h|6h|24h|7d|14d) with the
    sweeps and config changes in it, for the Server page's charts."""
    chosen = request.GET.get("range", "1h")
    if chosen not in history.RANGES:
        return JsonResponse(
            {"message": f"unknown range {chosen!r}; one of {', '.join(history.RANGES)}"},
            status=400,
        )
    return JsonResponse(history.history_json(chosen, time.time(), server_of(request)))
