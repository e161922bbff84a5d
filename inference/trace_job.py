"""Tracing one model on one server, as a job of the one lifecycle: a worker of the server's
queue turns Triton's tracing on for the model's next N requests (``TIMESTAMPS``, every
request, one file each); Triton stops by itself after N; the page's Stop (``stop``) or
the time limit (any worker's watchdog: ``TraceJob.tidy``) turns it off, so tracing never
stays on by accident. Changing trace settings is control: audited, and the role is
checked again when the worker turns it on."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone

from jobs import lifecycle
from jobs.lifecycle import Heartbeat, Outcome
from jobs.models import JobState
from jobs.queues import Route
from registry import servers
from registry.servers import UnknownServer
from registry.triton_clients import get_client
from repository_app import events
from repository_app.control import CONTROL_PERMISSION, NOT_PERMITTED
from team import audit
from triton_api.client import TritonError

from .models import TraceSession

KIND = "trace"
ON = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "1"}
OFF = {"trace_level": ["OFF"]}


def session_json(session: TraceSession) -> dict[str, Any]:
    return {
        "id": session.pk,
        "model": session.model,
        "server": session.server,
        "state": session.state,
        "count": session.count,
        "by": session.username,
        "queued_at": lifecycle.iso(session.queued_at),
        "expires_at": lifecycle.iso(session.expires_at),
        "ended_at": lifecycle.iso(session.ended_at),
        "ended_why": session.ended_why,
        "error": session.error,
    }


def turn_off(session: TraceSession, why: str, who: Any = None) -> str:
    """Tracing of the session's model off (Triton's words when it refuses), the session
    ended with ``why``; audited. Once: a session already ended stays as it ended."""
    if not TraceSession.objects.filter(pk=session.pk, ended_at__isnull=True).update(
        ended_at=timezone.now(), ended_why=why
    ):
        return "already off"
    message = f"tracing of {session.model} off: {why}"
    try:
        get_client(servers.get(session.server)).update_trace_settings(session.model, OFF)
    except (TritonError, UnknownServer) as exc:
        message = f"tracing of {session.model} not turned off ({why}): {exc.message}"
    audit.record(who or "system", "trace.off", model_name=session.model, server=session.server,
                 outcome="ok" if "not turned off" not in message else "failed", detail=message)  # fmt: skip
    session.refresh_from_db()
    _publish(session)
    return message


def _publish(session: TraceSession) -> None:
    events.publish(
        events.model_group(session.server, session.model), "trace.state", session_json(session)
    )


class TraceJob(lifecycle.BaseKind):
    name = KIND
    noun = "trace"
    resume_hint = "turns tracing on again"
    model = TraceSession

    def rows(self) -> QuerySet[TraceSession]:
        return TraceSession.objects.all()

    def route(self, job: TraceSession) -> Route:
        return servers.job_route(job.server)

    def time_limits(self, job: TraceSession) -> tuple[int, int]:
        return 60, 90

    def run(self, job: TraceSession, heartbeat: Heartbeat) -> Outcome:
        return turn_on(job)

    def publish(self, job: TraceSession) -> None:
        _publish(job)

    def ended(self, job: TraceSession, *, by_worker: bool) -> None:
        if job.state != JobState.SUCCEEDED and job.ended_at is None:
            TraceSession.objects.filter(pk=job.pk).update(
                ended_at=timezone.now(), ended_why=job.error or str(job.state)
            )

    def tidy(self) -> None:
        """Tracing past its time limit is turned off; a session whose N requests were all
        traced (Triton's count at 0) is ended."""
        now = timezone.now()
        live = TraceSession.objects.filter(state=JobState.SUCCEEDED, ended_at__isnull=True)
        for session in live.filter(expires_at__lte=now):
            turn_off(session, "time limit")
        for session in live.filter(expires_at__gt=now):
            try:
                left = get_client(servers.get(session.server)).trace_settings(session.model)
            except (TritonError, UnknownServer):
                continue
            if left.get("trace_count") == ["0"]:
                turn_off(session, f"all {session.count} requests traced")


lifecycle.register(TraceJob())


def turn_on(job: TraceSession) -> Outcome:
    session = TraceSession.objects.get(pk=job.pk)
    user = get_user_model().objects.filter(pk=session.user_id, is_active=True).first()

    def refuse(message: str, outcome: str = "failed") -> Outcome:
        audit.record(user or session.username, "trace.on", model_name=session.model,
                     server=session.server, outcome=outcome, detail=message)  # fmt: skip
        return Outcome(JobState.FAILED, message)

    try:
        server = servers.get(session.server)
    except UnknownServer as exc:
        return refuse(f"{exc.message} (removed since tracing was asked for)")
    if user is None or not user.has_perm(CONTROL_PERMISSION, server):
        return refuse(NOT_PERMITTED.format(server=server.name) + " (checked when it ran)", "denied")
    try:
        get_client(server).update_trace_settings(
            session.model, {**ON, "trace_count": str(session.count)}
        )
    except TritonError as exc:
        return refuse(f"Triton refused: {exc.message}")
    audit.record(user, "trace.on", model_name=session.model, server=server.name,
                 detail=f"the next {session.count} requests, until {session.expires_at:%H:%M:%S} UTC")  # fmt: skip
    return Outcome(JobState.SUCCEEDED)
