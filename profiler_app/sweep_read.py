"""Reading a sweep back, for its page, the REST API, the exports and its socket: the sweep
as JSON, a snapshot of it and its points, and the verdict (knee, recommendation, caveat:
`verdict.summarize`, from settled levels only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from repository_app import events

from . import jobs, measure, verdict
from .models import Sweep, SweepPoint
from .sweep_plan import params_of


def latency_value(point: SweepPoint | dict[str, Any], percentile: int | str) -> float | None:
    key = "avg_us" if percentile == "avg" else f"p{int(percentile)}_us"
    return point[key] if isinstance(point, dict) else getattr(point, key)


def knee_summary(sweep: Sweep, level_points: Iterable[SweepPoint] | None = None) -> dict[str, Any]:
    """The verdict (`verdict.summarize`): knee, best level within the budget, the
    recommendation and the caveat, from the levels that settled, for the sweep's state."""
    if level_points is None:
        level_points = SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL)
    return verdict.summarize(level_points, params_of(sweep), sweep.state)


def sweep_json(sweep: Sweep) -> dict[str, Any]:
    return {
        "id": sweep.pk,
        "kind": sweep.kind,
        "model": sweep.model,
        "version": sweep.version,
        "server": sweep.server,
        "server_facts": sweep.server_facts,
        "engine": sweep.engine,
        **jobs.lifecycle_json(sweep),
        "params": sweep.params,
        "command": sweep.command,
        "config_sha256": sweep.config_sha256,
        "created_at": sweep.created_at.isoformat() if sweep.created_at else None,
        "levels_total": sweep.levels_total,
        "summary": sweep.summary if sweep.finished else knee_summary(sweep),
        "name": sweep.name,
        "note": sweep.note,
        "model_kind": sweep.model_kind,
        "rounds": max(1, int(sweep.params.get("rounds") or 1)),
        **pace_json(sweep),
    }


def pace_json(sweep: Sweep) -> dict[str, Any]:
    """For the page's ETA: when this attempt started, the server's clock, and the windows an
    earlier attempt left (a resumed sweep's pace is measured on its own windows only)."""
    return {
        "started_at": sweep.started_at.isoformat() if sweep.started_at else None,
        "server_now": timezone.now().isoformat(),
        "windows_before_start": (
            SweepPoint.objects.filter(
                sweep=sweep, window__gte=0, recorded_at__lt=sweep.started_at
            ).count()
            if sweep.state == Sweep.State.RUNNING and sweep.started_at
            else 0
        ),
    }


def running_json(sweep: Sweep) -> dict[str, Any]:
    """What each level's event carries beside its point, so the page redraws from events
    alone: the verdict so far (knee, best level, recommendation) and the pace."""
    return {"summary": knee_summary(sweep), **pace_json(sweep)}


def snapshot(sweep_id: int) -> dict[str, Any] | None:
    """Everything a page needs: the sweep, all its points, and the group's seq (read
    *before* the points, so any event with a higher seq may repeat a point but none is
    missed)."""
    sweep = Sweep.objects.select_related("created_by").filter(pk=sweep_id).first()
    if sweep is None:
        return None
    seq = events.current_seq(sweep.group)
    points = [measure.point_json(p) for p in SweepPoint.objects.filter(sweep=sweep)]
    return {"group": sweep.group, "seq": seq, "sweep": sweep_json(sweep), "points": points}


def publish_summary(sweep: Sweep) -> None:
    events.publish(
        sweep.group,
        "sweep.summary",
        {"sweep": sweep.pk, "state": sweep.state, "error": sweep.error, "summary": sweep.summary},
    )
