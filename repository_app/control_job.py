"""A load, unload or reload started from a page or the API, as a job of the one lifecycle.

`control.start_action` checks the action, claims the model (the Redis key every process
sees) and queues a `ControlAction`; a Celery worker of the server's queue (`jobs.queues`)
claims the row, runs `control.run_action` (Triton's outcome, the audit, the desired state,
the events every page hears) and gives the model's claim back by its token. A worker that
dies mid-action leaves a row that any worker's watchdog declares interrupted: its claim is
given back (Triton's own LOADING state still refuses a second load meanwhile) and the
pages hear that it failed.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from jobs import lifecycle
from jobs.lifecycle import Heartbeat, Outcome
from jobs.models import JobState
from jobs.queues import Route
from registry import servers
from registry.servers import UnknownServer
from team import audit

from . import control, events
from .control import CONTROL_PERMISSION
from .models import ControlAction


class ControlJob(lifecycle.BaseKind):
    """The lifecycle's view of a `ControlAction` (the model's claim was taken when the action
    was asked for; "started" was published then, and `run_action` publishes the outcome)."""

    name = "control"
    noun = "model action"
    resume_hint = "runs it again"
    model = ControlAction

    def rows(self) -> QuerySet[ControlAction]:
        return ControlAction.objects.all()

    def route(self, job: ControlAction) -> Route:
        return servers.job_route(job.server)

    def time_limits(self, job: ControlAction) -> tuple[int, int]:
        return control.action_time_limits()

    def give_back(self, job: ControlAction) -> None:
        if job.claim_token:
            control.release_token(job.server, job.model, job.claim_token)

    def run(self, job: ControlAction, heartbeat: Heartbeat) -> Outcome:
        try:
            server = servers.get(job.server)
        except UnknownServer as exc:
            return Outcome(JobState.FAILED, f"{exc.message} (removed since it was asked for)")
        refused = _role_refusal(job, server)
        if refused:  # ended() tells the pages, as for any action that never reached Triton
            return Outcome(JobState.FAILED, refused)
        outcome = control.run_action(
            server, job.action, job.model, job.username, user_id=job.user_id
        )
        ControlAction.objects.filter(pk=job.pk).update(ok=outcome.ok, message=outcome.message)
        return Outcome(JobState.SUCCEEDED if outcome.ok else JobState.FAILED)

    def publish(self, job: ControlAction) -> None:
        """`run_action` tells the pages ("started" was sent when it was asked for)."""

    def ended(self, job: ControlAction, *, by_worker: bool) -> None:
        if by_worker and job.ok is not None:
            return  # run_action published the outcome
        # Cancelled while queued, declared interrupted, or failed before Triton was asked:
        # the pages that show "started" hear that it ended.
        message = job.error or "cancelled before it started"
        ControlAction.objects.filter(pk=job.pk).update(ok=False, message=message)
        events.publish(
            events.repository_group(job.server),
            "model.action",
            {"model": job.model, "action": job.action, "ok": False, "message": message,
             "states": {}, "previous_serving": False, "unreachable": False,
             "phase": "failed", "by": job.username},
        )  # fmt: skip


def _role_refusal(job: ControlAction, server: servers.Server) -> str:
    """Roles are checked on every step of a long action: a queued action whose user lost
    the role on the server meanwhile (or was deactivated) does not run; "" when it may."""
    if job.user_id is None:  # asked for by the system, not by a user
        return ""
    user = get_user_model().objects.filter(pk=job.user_id, is_active=True).first()
    if user is not None and user.has_perm(CONTROL_PERMISSION, server):
        return ""
    message = f"your role cannot load or unload models on {server.name}"
    audit.record(
        user or job.username, job.action, model_name=job.model, server=server.name,
        outcome="denied", detail=f"{message} (checked again when the action ran)",
    )  # fmt: skip
    return message


KIND = lifecycle.register(ControlJob())
