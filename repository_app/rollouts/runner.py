"""Run a rollout: one model's load, unload or reload on several servers at once.

``create`` checks the request (action, model name, the user's permission on each server:
``user.has_perm(CONTROL_PERMISSION, server)``), records a ``Rollout`` with one
``RolloutTarget`` per server and audits it; ``launch`` runs the targets concurrently in a
small thread pool (``wait=True``: and returns when all are done, as the CLI does).

Each target, just before it runs, checks the permission again (roles are checked on every
step of a long action), that its server still exists, that the model is in that server's
repository, then goes through the control path like a single action
(``control.claim``: explicit mode, not busy; ``control.run_action``: Triton's outcome,
the audit with the server, the desired state per server). A target that fails says why in
a word (``reason``) and in Triton's or our text (``message``), and the others go on;
nothing is retried. The last target to end sets the rollout's outcome ("partial: 2
loaded, 1 failed"). Every change is published to the rollout's group
(``events.rollout_group``); ``snapshot`` is what a page that joins late gets first.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import close_old_connections, transaction
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from team import audit

from .. import control, events, server_access, servers
from ..models import Rollout, RolloutTarget
from ..naming import InvalidModelName, check_model_name
from ..servers import UnknownServer
from .choose import Choice

log = logging.getLogger(__name__)

CONTROL_PERMISSION = "repository_app.control_models"
CANNOT_CONTROL = "your role cannot load or unload models"
NOT_PERMITTED = "your role cannot load or unload models on {server}"
VERBS = {"load": "loaded", "unload": "unloaded", "reload": "reloaded"}
# What a rollout's description may add after "hand-picked: a, b" (an allow-list: a page
# posts it, so it is never free text).
NOTES = {"config_saved": "where it was loaded when its config was saved"}

_executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rollout")

# Tests set this to act between a rollout's start and a target's own checks (a role taken
# away meanwhile); None otherwise.
before_target: Callable[[RolloutTarget], None] | None = None


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
            runner=runner_id(),
        )
        labels = {s.name: label_lines(s.labels) for s in choice.servers}
        RolloutTarget.objects.bulk_create(
            RolloutTarget(rollout=rollout, server=c.server, labels=labels.get(c.server, ""))
            if c.permitted
            else RolloutTarget(
                rollout=rollout,
                server=c.server,
                labels=labels.get(c.server, ""),
                state=RolloutTarget.State.FAILED,
                reason="not permitted",
                message=NOT_PERMITTED.format(server=c.server),
                started_at=now,
                ended_at=now,
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


def launch(rollout: Rollout, *, wait: bool = False) -> None:
    """Run the rollout's pending targets at once (``wait``: return when all are done)."""
    pending = list(
        rollout.targets.filter(state=RolloutTarget.State.PENDING).values_list("pk", flat=True)
    )
    futures: list[Future[None]] = [_executor.submit(_run_in_thread, pk) for pk in pending]
    if not futures:
        _finish_if_done(rollout.pk)
    if wait:
        wait_all(futures)
        rollout.refresh_from_db()


def _run_in_thread(target_pk: int) -> None:
    try:
        run_target(target_pk)
    except Exception:  # never let a thread die silently
        log.exception("rollout target %s failed unexpectedly", target_pk)
        _end(target_pk, ok=False, reason="failed", message="unexpected error: see the log")
    finally:
        try:
            target = RolloutTarget.objects.get(pk=target_pk)
            _finish_if_done(target.rollout_id)
        finally:
            close_old_connections()


def run_target(target_pk: int) -> None:
    """One server of a rollout, from pending to succeeded or failed."""
    target = RolloutTarget.objects.select_related("rollout").get(pk=target_pk)
    rollout = target.rollout
    started = RolloutTarget.objects.filter(pk=target.pk, state=RolloutTarget.State.PENDING).update(
        state=RolloutTarget.State.RUNNING, started_at=timezone.now()
    )
    if not started:  # ended meanwhile (reap)
        return
    target.refresh_from_db()
    _publish_target(target)
    if before_target is not None:
        before_target(target)
    label = f"rollout #{rollout.pk}"
    user = get_user_model().objects.filter(pk=rollout.user_id, is_active=True).first()
    who: Any = user or rollout.username

    def refuse(reason: str, message: str, outcome: str = "failed") -> None:
        audit.record(
            who, rollout.action, model_name=rollout.model, server=target.server, target=label,
            outcome=outcome, detail=f"{reason}: {message}",
        )  # fmt: skip
        _end(target.pk, ok=False, reason=reason, message=message)

    try:
        server = servers.get(target.server)
    except UnknownServer as exc:
        refuse("unknown server", f"{exc.message} (removed since the rollout started)")
        return
    if user is None or not user.has_perm(CONTROL_PERMISSION, server):
        refuse("not permitted", NOT_PERMITTED.format(server=server.name), "denied")
        return
    if not control.model_exists(server, rollout.model):
        refuse(
            "no model",
            f"no model '{rollout.model}' in the repository of {server.name} "
            f"({server.repository}) nor known to its Triton",
        )
        return
    try:
        control.claim(server, rollout.action, rollout.model, rollout.username)
    except control.ActionRefused as exc:
        refuse(exc.reason, str(exc))
        return
    try:
        outcome = control.run_action(
            server, rollout.action, rollout.model, rollout.username,
            user_id=user.pk, audit_target=label,
        )  # fmt: skip
    finally:
        control.release(server, rollout.model)
    reason = "" if outcome.ok else "unreachable" if outcome.unreachable else "refused"
    _end(target.pk, ok=outcome.ok, reason=reason, message=outcome.message)


def _end(target_pk: int, *, ok: bool, reason: str, message: str) -> None:
    """A target ends once: a later call (the thread's last resort, reap) changes nothing."""
    state = RolloutTarget.State.SUCCEEDED if ok else RolloutTarget.State.FAILED
    ended = RolloutTarget.objects.filter(
        pk=target_pk, state__in=(RolloutTarget.State.PENDING, RolloutTarget.State.RUNNING)
    ).update(state=state, reason=reason, message=message, ended_at=timezone.now())
    if ended:
        _publish_target(RolloutTarget.objects.get(pk=target_pk))


def summarize(action: str, targets: list[RolloutTarget]) -> tuple[str, str]:
    """The rollout's state and its summary once every target has ended."""
    ok = sum(1 for t in targets if t.state == RolloutTarget.State.SUCCEEDED)
    failed = len(targets) - ok
    verb = VERBS.get(action, action)
    if not failed:
        return str(Rollout.State.SUCCEEDED), f"succeeded: {ok} {verb}"
    failures = "; ".join(f"{t.server}: {t.reason}" for t in targets if t.state != "succeeded")
    if not ok:
        return str(Rollout.State.FAILED), f"failed: {failed} failed ({failures})"
    return str(Rollout.State.PARTIAL), f"partial: {ok} {verb}, {failed} failed ({failures})"


def _finish_if_done(rollout_pk: int) -> None:
    """The last target to end sets the outcome (once: the update is conditional)."""
    targets = list(RolloutTarget.objects.filter(rollout_id=rollout_pk))
    if any(t.state in (RolloutTarget.State.PENDING, RolloutTarget.State.RUNNING) for t in targets):
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


def _publish_target(target: RolloutTarget) -> None:
    events.publish(
        events.rollout_group(target.rollout_id),
        "rollout.target",
        {"rollout": target.rollout_id, **target_json(target)},
    )


def target_json(target: RolloutTarget) -> dict[str, Any]:
    return {
        "server": target.server,
        "state": target.state,
        "reason": target.reason,
        "message": target.message,
        "started_at": target.started_at.isoformat() if target.started_at else None,
        "ended_at": target.ended_at.isoformat() if target.ended_at else None,
    }


def rollout_json(rollout: Rollout) -> dict[str, Any]:
    targets = list(rollout.targets.all())
    counts = {state: 0 for state in RolloutTarget.State.values}
    for target in targets:
        counts[target.state] += 1
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
        "targets": [target_json(t) for t in targets],
        "url": reverse("rollout_detail", args=[rollout.pk]),
    }


def snapshot(pk: int) -> dict[str, Any] | None:
    """The rollout as it is now, or None when there is none. It only reads: a rollout whose
    process stopped is ended by the workers' watchdog (``reap_stopped``)."""
    rollout = Rollout.objects.filter(pk=pk).first()
    if rollout is None:
        return None
    return rollout_json(rollout)


# --- a rollout whose process is gone ---------------------------------------------------------


def _start_time(pid: int | str) -> str:
    """The process's start time in clock ticks since boot (Linux), "" when unknown: with
    the pid, it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time('self')}"


def _gone(runner: str) -> bool:
    """Whether the process that ran a rollout has surely stopped (only known on its host)."""
    parts = runner.split(":")
    if len(parts) != 3 or parts[0] != socket.gethostname():
        return False
    _, pid_text, started = parts
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError):
        return False
    return bool(started) and _start_time(pid_text) not in ("", started)


def reap_stopped() -> list[int]:
    """``reap`` every unfinished rollout (the watchdog's pass in each worker); the ids of
    those it ended."""
    ended = []
    for rollout in Rollout.objects.filter(finished_at__isnull=True):
        reap(rollout)
        if rollout.finished_at is not None:
            ended.append(rollout.pk)
    return ended


def reap(rollout: Rollout) -> None:
    """A rollout left unfinished by a process that stopped: its pending and running targets
    end as failed, "interrupted" (what Triton did meanwhile is unknown; nothing is retried)."""
    if rollout.finished_at is not None or not _gone(rollout.runner):
        return
    message = (
        f"the process that ran this rollout ({rollout.runner.rsplit(':', 1)[0]}) stopped before "
        "this server's outcome was known: look at the model's state on it (nothing was retried)"
    )
    unfinished = RolloutTarget.objects.filter(
        rollout=rollout, state__in=(RolloutTarget.State.PENDING, RolloutTarget.State.RUNNING)
    )
    for pk in list(unfinished.values_list("pk", flat=True)):
        _end(pk, ok=False, reason="interrupted", message=message)
    _finish_if_done(rollout.pk)
    rollout.refresh_from_db()


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
