"""A server's sweeps as marks on its metrics history (repository_app.history.markers):
each from its start to its end, or to now while it runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q
from django.urls import reverse

from registry.servers import Server
from repository_app.history import epoch

from .models import Sweep


def sweep_marks(start: datetime, end: datetime, server: Server, limit: int) -> list[dict[str, Any]]:
    sweeps = (
        Sweep.objects.filter(server=server.name, created_at__lte=end)
        .filter(Q(finished_at__gte=start) | Q(finished_at__isnull=True, created_at__gte=start))
        .order_by("-created_at")[:limit]
    )
    return [
        {
            "kind": "sweep",
            "t": epoch(sweep.started_at or sweep.created_at),
            "end": epoch(sweep.finished_at),
            "model": sweep.model,
            "label": f"sweep #{sweep.pk} {sweep.model} ({sweep.state})",
            "url": reverse("sweep_detail", args=[sweep.pk]),
        }
        for sweep in sweeps
    ]
