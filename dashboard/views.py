"""Project-level pages: the overview and the health endpoint."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from registry import server_access, servers
from registry.server_context import server_of
from registry.triton_clients import get_client
from triton_api.client import TritonError

from .health import as_json, system_health


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    # The dashboard's own health: the default server's Triton, whatever ?server= says.
    payload = as_json(system_health(servers.default()), details=request.user.is_authenticated)
    return JsonResponse(payload, status=200 if payload["status"] == "ok" else 503)


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    server = server_of(request)
    components = system_health(server)
    triton = components["triton"]
    models: dict[str, int] | None = None
    if triton.up:
        try:
            index = get_client(server).repository_index()
        except TritonError as exc:
            triton.detail = exc.message
        else:
            names = {m.name for m in index}
            ready = {m.name for m in index if m.state == "READY"}
            models = {"total": len(names), "ready": len(ready)}
    from django.conf import settings

    from common.supervisor_note import supervisor_note
    from team import audit
    from team.models import AuditEvent

    return render(
        request,
        "overview.html",
        {
            "supervisor_note": supervisor_note(settings.VAR_DIR),
            "components": components,
            "triton": triton,
            "models": models,
            # Servers hidden from the user (narrowed to none) are left out, as everywhere.
            "activity": audit.visible_events(
                AuditEvent.objects.all(), server_access.hidden_concerns(request.user)
            )[:15],
        },
    )
