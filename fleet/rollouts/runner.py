"""Run a rollout: one model's load, unload or reload on several servers at once.

``create`` checks the request (action, model name, the user's permission on each server:
``user.has_perm(CONTROL_PERMISSION, server)``), records a ``Rollout`` with one
``RolloutTarget`` per server and audits it. Each target is a job of the one lifecycle
(`target_job`): ``launch`` queues them on their servers' queues, where the Celery workers
near those servers run them at once; the CLI runs them in its own process instead
(``run_here``). A target that fails says why in a word (``reason``) and in Triton's or our
text (``message``), and the others go on. The last target to end sets the rollout's
outcome ("partial: 2 loaded, 1 failed"). ``cancel`` ends the queued targets, ``resume``
queues the failed, cancelled and interrupted ones again. Every change is published to the
rollout's group (``events.rollout_group``); ``snapshot`` is what a page that joins late
gets first.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from inference import checks as inference_checks
from jobs import lifecycle, queues
from jobs.models import FINISHED, JobState
from registry import server_access
from repository_app import control, events
from repository_app.control import CONTROL_PERMISSION, NOT_PERMITTED
from repository_app.naming import InvalidModelName, check_model_name
from team import audit

from ..models import Rollout, RolloutTarget
from .choose import Choice

log = logging.getLogger(__name__)

VERBS = {"load": "loaded", "unload": "unloaded", "reload": "reloaded"}
# What a rollout's description may add after "hand-picked: a, b" (an allow-list: a page
# posts it, so it is never free text).
NOTES = {"config_saved": "where it was loaded when its config was saved"}

KIND = "rollout"  # the lifecycle's kind of a target (`target_job`)
TARGET_STATES = ("pending", "running", "succeeded", "failed")
# The API's ?wait=1 reads until then: a load's own limit and the queue's margin.
WAIT_S = float(settings.TRITON_LOAD_TIMEOUT_S) + 2 * control.CLAIM_MARGIN_S
OPEN = (JobState.QUEUED, JobState.RUNNING)
# How a target's state reads in the rollout's JSON (its API and pages): queued is
# "pending", and a cancelled or interrupted target is "failed" with that reason.
SHOWN_STATE = {
    JobState.QUEUED: "pending",
    JobState.CANCELLED: "failed",
    JobState.INTERRUPTED: "failed",
}


class RolloutRefused(Exception):
    """Nothing was started: ``status`` 400 (``field`` at fault), 403 or 404."""

    def __init__(self, message: str, *, status: int = 400, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field


@dataclass
class Check:
    """What the start can say about one server before anything runs."""

    server: str
    permitted: bool


def check_request(action: object, model: object) -> tuple[str, str]:
    if action not in control.ACTIONS:
        raise RolloutRefused(
            f"action is one of {', '.join(control.ACTIONS)}, got {_shown(action)}", field="action"
        )
    try:
        name = check_model_name(model)
    except InvalidModelName as exc:
        raise RolloutRefused(str(exc), field="model") from None
    return str(action), name


def label_lines(labels: dict[str, str]) -> str:
    """A target's stored labels (RolloutTarget.labels): "\nkey=value\n...", in name order."""
    return "".join(f"\n{k}={v}" for k, v in sorted(labels.items())) + "\n" if labels else ""


def permitted(user: Any, choice: Choice) -> list[Check]:
    return [Check(s.name, bool(user.has_perm(CONTROL_PERMISSION, s))) for s in choice.servers]


def create(action: object, model: object, choice: Choice, user: Any, *, note: str = "") -> Rollout:
    """Record a rollout of ``action`` on ``model`` to the chosen servers, or RolloutRefused.

    A server the user may not control is a failed target from the start ("not permitted");
    when that is every server, nothing is recorded but the refusals (403)."""
    action, name = check_request(action, model)
    if note and note not in NOTES:
        raise RolloutRefused(f"unknown note {_shown(note)}", field="note")
    checks = permitted(user, choice)
    if not any(c.permitted for c in checks):
        for check in checks:
            audit.record(
                user, action, model_name=name, server=check.server, outcome="denied",
                detail=f"rollout refused: {NOT_PERMITTED.format(server=check.server)}",
            )  # fmt: skip
        raise RolloutRefused(
            NOT_PERMITTED.format(server=", ".join(c.server for c in checks)), status=403
        )
    chosen = choice.described + (f" ({NOTES[note]})" if note else "")
    now = timezone.now()
    with transaction.atomic():
        rollout = Rollout.objects.create(
            action=action,
            model=name,
            chosen=chosen[:500],
            user=user if getattr(user, "pk", None) else None,
            username=user.get_username(),
        )
        labels = {s.name: label_lines(s.labels) for s in choice.servers}
        RolloutTarget.objects.bulk_create(
            RolloutTarget(
                rollout=rollout, server=c.server, labels=labels.get(c.server, ""), queued_at=now
            )
            if c.permitted
            else RolloutTarget(
                rollout=rollout,
                server=c.server,
                labels=labels.get(c.server, ""),
                state=JobState.FAILED,
                reason="not permitted",
                message=NOT_PERMITTED.format(server=c.server),
                queued_at=now,
                finished_at=now,
            )  # fmt: skip
            for c in checks
        )
    label = f"rollout #{rollout.pk}"
    audit.record(
        user, "rollout", model_name=name, target=label, servers=choice.names,
        detail=f"{action} on {', '.join(choice.names)} ({chosen})",
    )  # fmt: skip
    for check in checks:
        if not check.permitted:
            audit.record(
                user, action, model_name=name, server=check.server, target=label,
                outcome="denied", detail=NOT_PERMITTED.format(server=check.server),
            )  # fmt: skip
    return rollout


def launch(rollout: Rollout) -> None:
    """Queue the rollout's queued targets on their servers' queues (sent on commit)."""
    kind = lifecycle.KINDS[KIND]
    queued = list(rollout.targets.filter(state=JobState.QUEUED).values_list("pk", flat=True))
    for pk in queued:
        lifecycle.enqueue_on_commit(kind, pk)
    if not queued:
        finish_if_done(rollout.pk)


def run_here(rollout: Rollout, command: str) -> None:
    """Run the rollout's queued targets in this process, at once, through the same
    lifecycle (the CLI: it needs no worker), and return when all have ended."""
    kind = lifecycle.KINDS[KIND]
    queued = list(rollout.targets.filter(state=JobState.QUEUED).values_list("pk", flat=True))
    where = queues.in_process(command)

    def one(pk: int) -> None:
        try:
            lifecycle.run(kind, pk, where)
        finally:
            close_old_connections()

    with ThreadPoolExecutor(max_workers=min(8, len(queued) or 1)) as pool:
        list(pool.map(one, queued))
    finish_if_done(rollout.pk)
    rollout.refresh_from_db()


def act_on(rollout: Rollout, what: str, user: Any) -> str:
    """Cancel or resume (``what``) a rollout for ``user``, who may control models on each
    of its servers still in the registry (RolloutRefused, 403, audited, otherwise); the
    outcome in words, audited too."""
    from registry import servers

    names = list(rollout.targets.values_list("server", flat=True))
    known = {s.name: s for s in servers.all() if s.name in names}
    denied = [n for n, s in known.items() if not user.has_perm(CONTROL_PERMISSION, s)]
    label = f"rollout #{rollout.pk}"
    if denied:
        message = NOT_PERMITTED.format(server=", ".join(denied))
        audit.record(
            user, f"rollout {what}", model_name=rollout.model, target=label,
            outcome="denied", detail=message,
        )  # fmt: skip
        raise RolloutRefused(message, status=403)
    done = cancel(rollout) if what == "cancel" else f"{resume(rollout)} queued again"
    audit.record(
        user, f"rollout {what}", model_name=rollout.model, target=label, servers=names,
        detail=done,
    )  # fmt: skip
    return done


def wait(rollout: Rollout, timeout_s: float) -> bool:
    """Wait (reading the database) until the rollout has finished; False at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        if Rollout.objects.filter(pk=rollout.pk, finished_at__isnull=False).exists():
            rollout.refresh_from_db()
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)


def cancel(rollout: Rollout) -> str:
    """End the queued targets now; a running one ends with its action (Triton is not
    stopped halfway through a load). Returns what happened, in words."""
    kind = lifecycle.KINDS[KIND]
    ended = asked = 0
    for pk in rollout.targets.filter(state__in=OPEN).values_list("pk", flat=True):
        try:
            if lifecycle.cancel(kind, pk):
                ended += 1
            else:
                asked += 1
        except lifecycle.JobError:
            continue  # it ended meanwhile
    if not ended and not asked:
        raise RolloutRefused("only a rollout with queued or running servers can be cancelled")
    running = f"; {asked} already running end with their action" if asked else ""
    return f"{ended} cancelled{running}"


def resume(rollout: Rollout) -> int:
    """Queue the rollout's failed, cancelled and interrupted targets again (each checks
    its permission again when it runs); returns how many."""
    kind = lifecycle.KINDS[KIND]
    with transaction.atomic():
        again = [
            pk
            for pk in rollout.targets.exclude(state__in=OPEN)
            .exclude(state=JobState.SUCCEEDED)
            .values_list("pk", flat=True)
            if lifecycle.requeue(kind, pk)
        ]
        for pk in again:
            lifecycle.enqueue_on_commit(kind, pk)
        if not again:
            raise RolloutRefused("only a rollout with failed servers can be resumed")
        RolloutTarget.objects.filter(pk__in=again).update(reason="", message="")
        Rollout.objects.filter(pk=rollout.pk).update(
            state=Rollout.State.RUNNING, summary="", finished_at=None
        )
    rollout.refresh_from_db()
    events.publish(
        events.rollout_group(rollout.pk),
        "rollout.state",
        {"rollout": rollout.pk, "state": rollout.state, "summary": "", "finished_at": None},
    )
    for target in rollout.targets.filter(pk__in=again):
        publish_target(target)
    return len(again)


def summarize(action: str, targets: list[RolloutTarget]) -> tuple[str, str]:
    """The rollout's state and its summary once every target has ended."""
    ok = sum(1 for t in targets if t.state == JobState.SUCCEEDED)
    failed = len(targets) - ok
    verb = VERBS.get(action, action)
    if not failed:
        return str(Rollout.State.SUCCEEDED), f"succeeded: {ok} {verb}"
    failures = "; ".join(f"{t.server}: {t.reason}" for t in targets if t.state != "succeeded")
    if not ok:
        return str(Rollout.State.FAILED), f"failed: {failed} failed ({failures})"
    return str(Rollout.State.PARTIAL), f"partial: {ok} {verb}, {failed} failed ({failures})"


def finish_if_done(rollout_pk: int) -> None:
    """The last target to end sets the outcome (once: the update is conditional)."""
    targets = list(RolloutTarget.objects.filter(rollout_id=rollout_pk))
    if any(t.state not in FINISHED for t in targets):
        return
    rollout = Rollout.objects.get(pk=rollout_pk)
    state, summary = summarize(rollout.action, targets)
    finished = timezone.now()
    won = Rollout.objects.filter(pk=rollout_pk, finished_at__isnull=True).update(
        state=state, summary=summary[:500], finished_at=finished
    )
    if not won:
        return
    events.publish(
        events.rollout_group(rollout_pk),
        "rollout.state",
        {"rollout": rollout_pk, "state": state, "summary": summary,
         "finished_at": finished.isoformat()},
    )  # fmt: skip
    events.notify(
        rollout.user_id,
        f"Rollout #{rollout_pk} ({rollout.action} {rollout.model}): {summary}",
        reverse("rollout_detail", args=[rollout_pk]),
    )


def finish_unfinished() -> None:
    """The outcome of every rollout whose targets have all ended (the watchdog's pass: a
    worker may have died between a target's end and the rollout's)."""
    for pk in Rollout.objects.filter(finished_at__isnull=True).values_list("pk", flat=True):
        finish_if_done(pk)


def publish_target(target: RolloutTarget) -> None:
    events.publish(
        events.rollout_group(target.rollout_id),
        "rollout.target",
        {"rollout": target.rollout_id, **target_json(target)},
    )


def target_json(target: RolloutTarget, checks: dict[str, Any] | None = None) -> dict[str, Any]:
    """A target as pages and the API show it; ``checks``: the model's check runs its
    action started on that server (inference.checks.summaries), when they are read."""
    return {
        "server": target.server,
        "state": SHOWN_STATE.get(target.state, target.state),
        "reason": target.reason,
        "message": target.message or target.error,
        "started_at": lifecycle.iso(target.started_at),
        "ended_at": lifecycle.iso(target.finished_at),
        "placement": lifecycle.placement_json(target, queues.queue_name(target.server)),
        "checks": checks,
    }


def rollout_json(rollout: Rollout) -> dict[str, Any]:
    targets = list(rollout.targets.all())
    ran = inference_checks.summaries(f"rollout #{rollout.pk}")
    counts = dict.fromkeys(("pending", "running", "succeeded", "failed"), 0)
    for target in targets:
        counts[SHOWN_STATE.get(target.state, target.state)] += 1
    return {
        "id": rollout.pk,
        "action": rollout.action,
        "model": rollout.model,
        "chosen": rollout.chosen,
        "by": rollout.username,
        "state": rollout.state,
        "summary": rollout.summary,
        "created_at": rollout.created_at.isoformat(),
        "finished_at": rollout.finished_at.isoformat() if rollout.finished_at else None,
        "counts": counts,
        "targets": [target_json(t, ran.get(t.server)) for t in targets],
        "url": reverse("rollout_detail", args=[rollout.pk]),
    }


def snapshot(pk: int) -> dict[str, Any] | None:
    """The rollout as it is now, or None when there is none. It only reads: a target whose
    worker died is declared interrupted by the workers' watchdog."""
    rollout = Rollout.objects.filter(pk=pk).first()
    if rollout is None:
        return None
    return rollout_json(rollout)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def seen_by(user: Any) -> QuerySet[Rollout]:
    """The rollouts `user` may see: none that touched a server narrowed to none for them
    (such a server does not exist for them, its name included)."""
    hidden = server_access.hidden_names(user)
    found = Rollout.objects.all()
    if hidden:
        found = found.exclude(targets__server__in=hidden)
    for label in server_access.hidden_labels(user):  # as the servers were labelled then
        found = found.exclude(targets__labels__contains=f"\n{label}\n")
    return found


def snapshot_for(user: Any, pk: int) -> dict[str, Any] | None:
    """`snapshot(pk)`, or None when the rollout is missing or not `seen_by` the user."""
    if not seen_by(user).filter(pk=pk).exists():
        return None
    return snapshot(pk)
