"""One server of a rollout, as a job of the one lifecycle (`jobs.lifecycle`).

A target is queued on its server's queue (`jobs.queues`: a worker near that server runs it)
and, once claimed, checks again that its server still exists, that the rollout's user may
still control models on it (roles are checked on every step of a long action), that the
model is in that server's repository, then goes through the control path like a single
action (``control.claim``: explicit mode, not busy; ``control.run_action``: Triton's
outcome, the audit with the server, the desired state per server). A target that fails
says why in a word (``reason``) and in Triton's or our text (``message``). The last target
to end sets the rollout's outcome (`runner.finish_if_done`). A target whose worker died is
declared interrupted by any worker's watchdog, wherever it ran; Cancel ends queued targets
(a load that Triton has started is not stopped halfway); Resume queues the failed,
cancelled and interrupted ones again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from jobs import lifecycle
from jobs.lifecycle import Heartbeat, Outcome
from jobs.models import JobState
from jobs.queues import Route
from registry import servers
from registry.servers import UnknownServer
from repository_app import control
from team import audit

from ..models import RolloutTarget
from . import runner

# Tests set this to act between a target's claim and its own checks (a role taken away
# meanwhile); None otherwise.
before_target: Callable[[RolloutTarget], None] | None = None


class TargetJob(lifecycle.BaseKind):
    """The lifecycle's view of a `RolloutTarget` (the model's claim is taken and released
    by its action, `control.claim`)."""

    name = "rollout"
    noun = "rollout target"
    resume_hint = "runs the action on this server again"
    model = RolloutTarget

    def rows(self) -> QuerySet[RolloutTarget]:
        return RolloutTarget.objects.all()

    def route(self, job: RolloutTarget) -> Route:
        return servers.job_route(job.server)

    def time_limits(self, job: RolloutTarget) -> tuple[int, int]:
        return control.action_time_limits()

    def run(self, job: RolloutTarget, heartbeat: Heartbeat) -> Outcome:
        return run_target(job, heartbeat)

    def publish(self, job: RolloutTarget) -> None:
        runner.publish_target(job)

    def ended(self, job: RolloutTarget, *, by_worker: bool) -> None:
        if not by_worker:  # cancelled while queued, or declared interrupted
            reason = "cancelled" if job.state == JobState.CANCELLED else "interrupted"
            message = job.error or "cancelled before it started"
            RolloutTarget.objects.filter(pk=job.pk).update(reason=reason, message=message)
            job.reason, job.message = reason, message
            runner.publish_target(job)
        runner.finish_if_done(job.rollout_id)

    def tidy(self) -> None:
        runner.finish_unfinished()


KIND = lifecycle.register(TargetJob())


def _ended(job: RolloutTarget, ok: bool, reason: str, message: str) -> Outcome:
    """The outcome of a target, its reason and message kept on the row first (the
    lifecycle stores the state and announces it)."""
    RolloutTarget.objects.filter(pk=job.pk).update(reason=reason, message=message)
    return Outcome(JobState.SUCCEEDED if ok else JobState.FAILED)


def run_target(job: RolloutTarget, heartbeat: Heartbeat | None = None) -> Outcome:
    """One server of a rollout, claimed, to its outcome."""
    target = RolloutTarget.objects.select_related("rollout").get(pk=job.pk)
    rollout = target.rollout
    if before_target is not None:
        before_target(target)
    label = f"rollout #{rollout.pk}"
    user = get_user_model().objects.filter(pk=rollout.user_id, is_active=True).first()
    who: Any = user or rollout.username

    def refuse(reason: str, message: str, outcome: str = "failed") -> Outcome:
        audit.record(
            who, rollout.action, model_name=rollout.model, server=target.server, target=label,
            outcome=outcome, detail=f"{reason}: {message}",
        )  # fmt: skip
        return _ended(target, False, reason, message)

    if heartbeat is not None and heartbeat.stopping:
        return _ended(target, False, "cancelled", "cancelled before its action started")
    try:
        server = servers.get(target.server)
    except UnknownServer as exc:
        return refuse("unknown server", f"{exc.message} (removed since the rollout started)")
    if user is None or not user.has_perm(runner.CONTROL_PERMISSION, server):
        return refuse("not permitted", runner.NOT_PERMITTED.format(server=server.name), "denied")
    if not control.model_exists(server, rollout.model):
        return refuse(
            "no model",
            f"no model '{rollout.model}' in the repository of {server.name} "
            f"({server.repository}) nor known to its Triton",
        )
    try:
        control.claim(server, rollout.action, rollout.model, rollout.username)
    except control.ActionRefused as exc:
        return refuse(exc.reason, str(exc))
    try:
        outcome = control.run_action(
            server, rollout.action, rollout.model, rollout.username,
            user_id=user.pk, audit_target=label,
        )  # fmt: skip
    finally:
        control.release(server, rollout.model)
    reason = "" if outcome.ok else "unreachable" if outcome.unreachable else "refused"
    return _ended(target, outcome.ok, reason, outcome.message)
