"""The one job lifecycle: queue, claim, heartbeat, time limit, cancel, resume, finish, publish.

In the spirit of NetBox's `JobRunner`: this module owns a job's whole life, and a kind of
job (`Kind`) supplies only what differs: its model, where its task goes, what it must hold
to run (a sweep: its server's slot), its work, and what it announces. Kinds register when
their app is ready; this module imports none of them, so every app may build on it.

The guarantees, and why:
- A job is a row of its kind's model (`jobs.models.JobRow`). Creating one commits it
  QUEUED; on commit `dispatch` sends the one Celery task (`jobs.run`) with the kind's time
  limits to the queue the kind's `route` names (the server's own queue when a worker
  consumes it, else the default one, or held until its own worker appears), recording
  where it went and why.
- `claim` is a conditional UPDATE (QUEUED -> RUNNING) in one transaction with the kind's
  `take` (e.g. a server's slot), so a second copy of the task, or one redelivered after
  the job was declared interrupted, does nothing; the claiming worker and its host are
  recorded.
- A running job beats `heartbeat_at` every 2 s from a `Heartbeat` thread, which also reads
  the cancel flag every 0.2 s; the work polls it (never `revoke(terminate=True)`).
- Every way out of `execute` goes through `finish`: RUNNING -> a final state only from
  RUNNING (a job the watchdog declared interrupted stays so). A job whose worker died
  (no heartbeat for STALE_AFTER_S) is declared INTERRUPTED by `reap_stale`, which runs in
  every worker's watchdog, on whatever host: it reads only the database.
- `cancel` ends a queued job at once and asks a running one to stop; `resume` queues a
  failed, cancelled or interrupted job again (the kind does only what is missing).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from celery import shared_task
from django.db import connections, models, transaction
from django.db.models import Q
from django.utils import timezone

from . import queues
from .models import RESUMABLE, JobState
from .queues import Route

log = logging.getLogger(__name__)

State = JobState
HEARTBEAT_EVERY_S = 2.0
CANCEL_POLL_S = 0.2
REDISPATCH_AFTER_S = 60.0
STALE_AFTER_S = 20.0  # no heartbeat for this long: the watchdog declares the job interrupted


class JobError(Exception):
    """A job cannot be created or changed; the message is fit to show a user."""


@dataclass(frozen=True)
class Outcome:
    state: str
    error: str = ""


class Kind(Protocol):
    """What one kind of job supplies; the lifecycle around it is this module's."""

    name: str  # the kind's name, sent with its task
    noun: str  # "sweep", "rollout target": for messages
    resume_hint: str  # what resuming an interrupted job does ("measures the missing levels")
    model: type[models.Model]  # a `JobRow`

    def rows(self) -> Any:
        """The kind's rows (a QuerySet of `model`: kinds may share a table)."""

    def route(self, job: Any) -> Route:
        """Where the job's task goes now (its server's queue), and why."""

    def time_limits(self, job: Any) -> tuple[int, int]:
        """(soft, hard) seconds for the task."""

    def take(self, job: Any) -> bool:
        """Inside the claim's transaction: take what the job must hold to run (False: not
        now; the claim rolls back)."""

    def give_back(self, job: Any) -> None:
        """Free what `take` took (no-op when nothing is held)."""

    def run(self, job: Any, heartbeat: Heartbeat) -> Outcome:
        """Do the work of a claimed job; return how it ended. Raising is allowed: the
        lifecycle turns it into FAILED with a message."""

    def publish(self, job: Any) -> None:
        """Tell the pages that show the job its state changed."""

    def ended(self, job: Any, *, by_worker: bool) -> None:
        """After the final state is stored (`by_worker`: the job ran to its end; else it was
        cancelled while queued or declared interrupted): leave a summary, announce it,
        start what waited for it."""

    def waiting(self) -> Any:
        """The queued jobs that could run now (a sweep: the head of each free server's
        queue): the watchdog sends each again when its task went missing."""

    def tidy(self) -> None:
        """The watchdog's pass over what dead workers of this kind left behind."""


class BaseKind:
    """A kind's defaults: it holds nothing beyond its row, tidies nothing, announces only
    through its work, and every queued row of it may be sent again."""

    def rows(self) -> Any:
        raise NotImplementedError

    def take(self, job: Any) -> bool:
        return True

    def give_back(self, job: Any) -> None:
        return None

    def publish(self, job: Any) -> None:
        return None

    def waiting(self) -> Any:
        return self.rows().filter(state=State.QUEUED)

    def tidy(self) -> None:
        return None


KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    KINDS[kind.name] = kind
    return kind


def _rows(kind: Kind) -> Any:
    return kind.rows()


# --- queueing ---------------------------------------------------------------------------------


def enqueue_on_commit(kind: Kind, job_id: int) -> None:
    """Send the job's task once the transaction that created (or re-queued) it commits."""
    transaction.on_commit(lambda: dispatch(kind, job_id))


def record_route(kind: Kind, job: Any, route: Route) -> None:
    """Store where the job goes and why; a page hears of a change (e.g. now waiting)."""
    if (job.queue, job.routing, job.waiting_for_worker) == (route.queue, route.note, route.waiting):
        return
    if (
        _rows(kind)
        .filter(pk=job.pk, state=State.QUEUED)
        .update(queue=route.queue, routing=route.note, waiting_for_worker=route.waiting)
    ):
        job.queue, job.routing, job.waiting_for_worker = route.queue, route.note, route.waiting
        kind.publish(job)


def dispatch(kind: Kind, job_id: int) -> bool:
    """Send the task of a QUEUED job to the queue its kind routes it to. False when it is
    not queued, is held for its server's own worker, or the broker is down: it stays
    queued and the watchdog routes it again later."""
    job = _rows(kind).filter(pk=job_id, state=State.QUEUED).first()
    if job is None:
        return False
    route = kind.route(job)
    record_route(kind, job, route)
    if route.waiting:
        return False
    soft, hard = kind.time_limits(job)
    _rows(kind).filter(pk=job_id).update(dispatched_at=timezone.now())
    try:
        run_task.apply_async(
            args=[kind.name, job_id], queue=route.queue, soft_time_limit=soft, time_limit=hard
        )
    except Exception as exc:  # noqa: BLE001 - any broker failure: retried by the watchdog
        log.warning("%s #%s not dispatched: %s", kind.noun, job_id, exc)
        return False
    return True


def redispatch_lost(kind: Kind, job: Any, now: Any) -> bool:
    """The watchdog's step for a queued job: send it (again) when its task went missing
    (its last one is older than REDISPATCH_AFTER_S, or was never sent) or it is held for
    its server's own worker (routed again on every pass)."""
    before = now - timedelta(seconds=REDISPATCH_AFTER_S)
    if job.waiting_for_worker or job.dispatched_at is None or job.dispatched_at < before:
        return dispatch(kind, job.pk)
    return False


# --- claiming ---------------------------------------------------------------------------------


class _NotClaimed(Exception):
    pass


def claim(kind: Kind, job_id: int, where: Mapping[str, str] | None = None) -> bool:
    """QUEUED -> RUNNING, holding what the kind's `take` takes; False when that is taken or
    the job is not queued. ``where``: the claiming worker, its host and queue."""
    job = _rows(kind).filter(pk=job_id, state=State.QUEUED).first()
    if job is None:
        return False
    now = timezone.now()
    try:
        with transaction.atomic():
            if not kind.take(job):
                raise _NotClaimed
            started = (
                _rows(kind)
                .filter(pk=job_id, state=State.QUEUED)
                .update(
                    state=State.RUNNING,
                    started_at=now,
                    heartbeat_at=now,
                    finished_at=None,
                    error="",
                    cancel_requested=False,
                    waiting_for_worker=False,
                    attempts=job.attempts + 1,
                    **dict(where or {}),
                )
            )
            if not started:
                raise _NotClaimed  # rolls `take` back too
    except _NotClaimed:
        return False
    return True


# --- running ----------------------------------------------------------------------------------


class Heartbeat(threading.Thread):
    """Beats the heartbeat and reads the cancel flag, off the work's event loop."""

    def __init__(self, model: type[models.Model], job_id: int) -> None:
        super().__init__(name=f"job-{job_id}-heartbeat", daemon=True)
        self.rows = model._default_manager  # type: ignore[attr-defined]
        self.job_id = job_id
        self.cancel = False
        self.lost = False  # no longer RUNNING (e.g. declared interrupted): stop
        self._stop_event = threading.Event()

    @property
    def stopping(self) -> bool:
        return self.cancel or self.lost

    def run(self) -> None:
        last_beat = 0.0
        try:
            while not self._stop_event.wait(CANCEL_POLL_S):
                try:
                    if time.monotonic() - last_beat >= HEARTBEAT_EVERY_S:
                        last_beat = time.monotonic()
                        if not self.rows.filter(pk=self.job_id, state=State.RUNNING).update(
                            heartbeat_at=timezone.now()
                        ):
                            self.lost = True
                    flag = (
                        self.rows.filter(pk=self.job_id)
                        .values_list("cancel_requested", flat=True)
                        .first()
                    )
                    self.cancel = bool(flag)
                except Exception as exc:  # noqa: BLE001 - a locked DB must not end the job
                    log.warning("job #%s heartbeat: %s", self.job_id, exc)
        finally:
            connections.close_all()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def run(kind: Kind, job_id: int, where: Mapping[str, str] | None = None) -> str:
    """Claim the job and run it to its end; 'waiting' when it cannot be claimed now (what
    holds its server dispatches it when it ends)."""
    if not claim(kind, job_id, where):
        return "waiting"
    return execute(kind, job_id)


def execute(kind: Kind, job_id: int) -> str:
    """Run a job this process has claimed, to its end; returns the final state. Never
    leaves it RUNNING: every way out goes through `finish`."""
    job = _rows(kind).get(pk=job_id)
    kind.publish(job)
    heartbeat = Heartbeat(kind.model, job_id)
    heartbeat.start()
    try:
        outcome = kind.run(job, heartbeat)
    except Exception as exc:  # noqa: BLE001 - whatever happened, the job must not stay running
        from celery.exceptions import SoftTimeLimitExceeded

        if isinstance(exc, SoftTimeLimitExceeded):
            message = f"time limit exceeded: the {kind.noun} took longer than planned"
        else:
            log.exception("%s #%s failed", kind.noun, job_id)
            message = f"unexpected error: {exc}"
        outcome = Outcome(State.FAILED, message)
    finally:
        heartbeat.stop()
    return finish(kind, job_id, outcome)


def finish(kind: Kind, job_id: int, outcome: Outcome) -> str:
    """RUNNING -> a final state (only from RUNNING: a job the watchdog already declared
    interrupted stays so); gives back what it held, then the kind announces the end."""
    updated = (
        _rows(kind)
        .filter(pk=job_id, state=State.RUNNING)
        .update(state=outcome.state, error=outcome.error, finished_at=timezone.now())
    )
    job = _rows(kind).get(pk=job_id)
    kind.give_back(job)
    if updated:
        kind.publish(job)
        kind.ended(job, by_worker=True)
    return str(job.state)


def interrupt(kind: Kind, job: Any, message: str) -> bool:
    """RUNNING -> INTERRUPTED when its heartbeat is still the stale one read (the
    watchdog's step); gives back what it held, then the kind announces it."""
    if (
        not _rows(kind)
        .filter(pk=job.pk, state=State.RUNNING, heartbeat_at=job.heartbeat_at)
        .update(state=State.INTERRUPTED, error=message, finished_at=timezone.now())
    ):
        return False
    job.refresh_from_db()
    kind.give_back(job)
    kind.publish(job)
    kind.ended(job, by_worker=False)
    return True


def stale(kind: Kind, now: Any) -> Any:
    """The RUNNING jobs of a kind whose heartbeat stopped (older than STALE_AFTER_S)."""
    cutoff = now - timedelta(seconds=STALE_AFTER_S)
    return (
        _rows(kind)
        .filter(state=State.RUNNING)
        .filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff))
    )


def check() -> list[tuple[str, int]]:
    """The watchdog's pass over every kind (any number may run at once: every step is a
    conditional UPDATE): jobs whose worker died are declared INTERRUPTED, queued jobs whose
    task went missing are sent again, and each kind tidies what dead workers left. Returns
    the (kind, id) of the jobs it declared interrupted."""
    now = timezone.now()
    interrupted = []
    for kind in KINDS.values():
        for job in stale(kind, now):
            last = job.heartbeat_at or job.started_at
            message = (
                f"interrupted: the worker stopped sending heartbeats (last at "
                f"{last:%Y-%m-%d %H:%M:%S} UTC); resume {kind.resume_hint}"
            )
            if interrupt(kind, job, message):
                interrupted.append((kind.name, job.pk))
        for job in kind.waiting():
            redispatch_lost(kind, job, now)
        kind.tidy()
    return interrupted


def heartbeat_stale(job: Any) -> bool:
    """A RUNNING job whose heartbeat stopped: what a page says while the watchdog (in the
    workers) has not yet declared it interrupted; reading pages never change a job."""
    if job.state != State.RUNNING:
        return False
    last = job.heartbeat_at or job.started_at
    return last is not None and (timezone.now() - last).total_seconds() > STALE_AFTER_S


@shared_task(name="jobs.run", ignore_result=True, bind=True)
def run_task(self: Any, kind_name: str, job_id: int) -> str:
    """The one Celery task: a job of any kind (see the module's docstring)."""
    return run(KINDS[kind_name], job_id, queues.claimed_by(self.request))


# --- user actions -----------------------------------------------------------------------------


def cancel(kind: Kind, job_id: int) -> bool:
    """A queued job is cancelled at once (True); a running one is asked to stop (False);
    JobError when it is neither."""
    if (
        _rows(kind)
        .filter(pk=job_id, state=State.QUEUED)
        .update(state=State.CANCELLED, finished_at=timezone.now(), cancel_requested=True)
    ):
        job = _rows(kind).get(pk=job_id)
        kind.publish(job)
        kind.ended(job, by_worker=False)
        return True
    if _rows(kind).filter(pk=job_id, state=State.RUNNING).update(cancel_requested=True):
        kind.publish(_rows(kind).get(pk=job_id))
        return False
    raise JobError(f"only a queued or running {kind.noun} can be cancelled")


def requeue(kind: Kind, job_id: int) -> bool:
    """FAILED/CANCELLED/INTERRUPTED -> QUEUED; False when the job is not in one of those
    states. The caller sends its task (`enqueue_on_commit`, or its own dispatch)."""
    updated = (
        _rows(kind)
        .filter(pk=job_id, state__in=RESUMABLE)
        .update(
            state=State.QUEUED,
            queued_at=timezone.now(),
            cancel_requested=False,
            error="",
            finished_at=None,
            # Not claimed yet: the worker of the last attempt is not this one's.
            worker="",
            worker_host="",
        )
    )
    return bool(updated)


def iso(moment: Any) -> str | None:
    return moment.isoformat() if moment else None


def placement_json(job: Any, server_queue: str) -> dict[str, Any]:
    """Where the job's task went and why, and the worker (and host) that claimed it."""
    return {
        "server_queue": server_queue,
        "queue": job.queue,
        "routing": job.routing,
        "waiting_for_worker": job.waiting_for_worker,
        "worker": job.worker,
        "worker_host": job.worker_host,
    }
