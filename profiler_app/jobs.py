"""The one job lifecycle: every perf sweep and every config search is a job of this queue.

In the spirit of NetBox's `JobRunner`: this module owns a job's whole life, and a kind of
job (`JobKind`: a sweep, `profiler_app.sweep_run`; a config search,
`profiler_app.search.runner`) supplies only what differs: its time limits, its work, the
summary it leaves and what it announces when it ends. Kinds register themselves when
their module is imported (`ProfilerAppConfig.ready`), so this module imports neither.

The guarantees, and why:
- A job is a `Sweep` row with a `kind`. Creating one commits it QUEUED and, on commit,
  sends the one Celery task (`profiler_app.run_job`) with the kind's time limits, to the
  queue `queue_for(server)` names (`profiler_app.queues`: the server's own queue when a
  worker consumes it, else the default one; or held until its own worker appears). The
  job records where it went and why, and which worker (and host) claimed it.
- A job runs on one Triton server (`Sweep.server`: its name in `repository_app.servers`),
  whose facts (version, GPUs) it records each time it starts (`Sweep.server_facts`).
- One job runs per Triton server at a time, in one FIFO queue whatever its kind. `claim`
  is a conditional UPDATE on the server's `SweepSlot` (free -> this job) and on the job
  (QUEUED -> RUNNING), in one transaction, and only for the head of the queue, so a
  second copy of the task (or one redelivered after the job was declared interrupted)
  does nothing.
- A task that cannot claim returns at once: a queued job never holds a worker process.
  The job that ends (or the watchdog that declares one interrupted) frees the slot and
  dispatches the next queued job of that server; the watchdog re-dispatches a queued job
  whose task went missing.
- A running job beats `heartbeat_at` every 2 s from a `Heartbeat` thread, which also reads
  the cancel flag every 0.2 s; the work polls it, so Cancel stops a job within one
  measurement window and keeps what was measured (never `revoke(terminate=True)`).
- Every way out of `run` goes through `finish`: RUNNING -> a final state only from
  RUNNING (a job the watchdog declared interrupted stays so), with the kind's summary.
- `resume` queues a failed/cancelled/interrupted job again; the kind measures only what
  is missing.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from celery import shared_task
from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from common.redact import redact
from repository_app import events, servers
from repository_app.servers import Server

from . import queues
from .models import Sweep, SweepSlot
from .queues import Route

log = logging.getLogger(__name__)

State = Sweep.State
HEARTBEAT_EVERY_S = 2.0
CANCEL_POLL_S = 0.2
REDISPATCH_AFTER_S = 60.0
STALE_AFTER_S = 20.0  # no heartbeat for this long: the watchdog declares the job interrupted


class JobError(Exception):
    """A job cannot be created or changed; the message is fit to show a user."""


class QueueUnavailable(JobError):
    """The broker (Redis) does not answer: nothing was queued."""


@dataclass(frozen=True)
class Outcome:
    state: str
    error: str = ""


class JobKind(Protocol):
    """What one kind of job supplies; the lifecycle around it is this module's."""

    name: str  # the value of Sweep.kind
    noun: str  # "sweep", "search": for messages

    def time_limits(self, job: Sweep) -> tuple[int, int]:
        """(soft, hard) seconds for the task."""

    def run(self, job: Sweep, heartbeat: Heartbeat) -> Outcome:
        """Do the work of a claimed job; return how it ended. Raising is allowed: the
        lifecycle turns it into FAILED with a message."""

    def summary(self, job: Sweep) -> dict[str, Any]:
        """What the job leaves in `Sweep.summary` when it ends (or is interrupted)."""

    def ended(self, job: Sweep, *, by_worker: bool) -> None:
        """Announce the final state beyond `sweep.state` (its summary, a notification when
        `by_worker`: the job ran to its end); also called when the watchdog declared it
        interrupted or a queued job was cancelled."""

    def tidy(self) -> None:
        """The watchdog's pass over what dead workers of this kind left behind."""


KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    KINDS[kind.name] = kind
    return kind


def kind_of(job: Sweep) -> JobKind:
    return KINDS[job.kind]


# --- queueing ---------------------------------------------------------------------------------


def check_queue(noun: str = "sweep") -> None:
    """Raise QueueUnavailable unless the Celery broker answers a ping."""
    import redis

    try:
        redis.Redis.from_url(
            settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1
        ).ping()
    except (redis.RedisError, OSError) as exc:
        raise QueueUnavailable(
            f"the task queue (Redis at {redact(settings.CELERY_BROKER_URL)}) is unreachable, so "
            f"the {noun} was not queued: try again when Redis is back"
        ) from exc


def config_snapshot(server: Server, model: str) -> tuple[str, str]:
    """(sha256, text) of the model's config.pbtxt in the server's repository; empty when
    there is none."""
    from repository_app.repository import RepositoryError, model_folder

    try:  # the one way from a model name to its folder (roots, links and names checked)
        raw = (model_folder(model, server.repository) / "config.pbtxt").read_bytes()
    except (RepositoryError, OSError):
        return "", ""
    return hashlib.sha256(raw).hexdigest(), raw.decode("utf-8", errors="replace")


def create(
    kind: str,
    params: dict[str, Any],
    *,
    server: Server,
    user: Any,
    levels_total: int,
    enqueue: bool,
    **fields: Any,
) -> Sweep:
    """A QUEUED job of `kind` on `server`, with the model's config as it is now; its task
    is sent when the caller's transaction commits (when `enqueue`)."""
    model = str(params["model"])
    sha, text = config_snapshot(server, model)
    job = Sweep.objects.create(
        kind=kind,
        model=model,
        version=str(params.get("version") or ""),
        server=server.name,
        config_sha256=sha,
        config_text=text,
        params=params,
        created_by=user if getattr(user, "is_authenticated", False) else None,
        state=State.QUEUED,
        queued_at=timezone.now(),
        levels_total=levels_total,
        **fields,
    )
    if enqueue:
        enqueue_on_commit(job)
    return job


def enqueue_on_commit(job: Sweep) -> None:
    """Send the job's task once the transaction that created (or re-queued) it commits."""
    transaction.on_commit(lambda: dispatch(job.pk))


def queue_for(server: Server) -> Route:
    """Where a job of ``server`` goes now, and why (`profiler_app.queues`): the one rule
    for the jobs' tasks and for a distributed sweep's load agents."""
    return queues.queue_for(server)


def route_of(job: Sweep) -> Route:
    try:
        server = servers.get(job.server)
    except servers.UnknownServer as exc:
        # The task fails it ("removed since it was queued"): any worker can say so.
        fallback = queues.default_queue()
        return Route(job.server, fallback, f"{exc.message}: sent to {fallback} to be failed")
    return queue_for(server)


def _record_route(job: Sweep, route: Route) -> None:
    """Store where the job goes and why; a page hears of a change (e.g. now waiting)."""
    changed = (job.queue, job.routing, job.waiting_for_worker) != (
        route.queue,
        route.note,
        route.waiting,
    )
    if not changed:
        return
    if Sweep.objects.filter(pk=job.pk, state=State.QUEUED).update(
        queue=route.queue, routing=route.note, waiting_for_worker=route.waiting
    ):
        job.queue, job.routing, job.waiting_for_worker = route.queue, route.note, route.waiting
        publish_state(job)


def dispatch(job_id: int) -> bool:
    """Send the task of a QUEUED job to its queue (`queue_for`). False when it is not
    queued, is held for its server's own worker, or the broker is down: it stays queued and
    the watchdog routes it again later."""
    job = Sweep.objects.filter(pk=job_id, state=State.QUEUED).first()
    if job is None:
        return False
    route = route_of(job)
    _record_route(job, route)
    if route.waiting:
        return False
    soft, hard = kind_of(job).time_limits(job)
    Sweep.objects.filter(pk=job_id).update(dispatched_at=timezone.now())
    try:
        run_job_task.apply_async(
            args=[job_id], queue=route.queue, soft_time_limit=soft, time_limit=hard
        )
    except Exception as exc:  # noqa: BLE001 - any broker failure: retried by the watchdog
        log.warning("job #%s not dispatched: %s", job_id, exc)
        return False
    return True


def queued(server: str) -> QuerySet[Sweep]:
    return Sweep.objects.filter(server=server, state=State.QUEUED).order_by("queued_at", "id")


def _ahead_of(job: Sweep) -> QuerySet[Sweep]:
    return queued(job.server).filter(
        Q(queued_at__lt=job.queued_at) | Q(queued_at=job.queued_at, id__lt=job.pk)
    )


def queue_position(job: Sweep) -> int | None:
    """1 = next to run on its server; None when not queued."""
    if job.state != State.QUEUED:
        return None
    return _ahead_of(job).count() + 1


def running_on(server: str) -> Sweep | None:
    slot = SweepSlot.objects.filter(server=server).select_related("sweep").first()
    return slot.sweep if slot and slot.sweep else None


def dispatch_next(server: str) -> int | None:
    """Dispatch the head of the server's queue when its slot is free; returns its id."""
    if SweepSlot.objects.filter(server=server, sweep__isnull=False).exists():
        return None
    head = queued(server).first()
    if head is None:
        return None
    enqueue_on_commit(head)
    return head.pk


# --- claiming the server ----------------------------------------------------------------------


class _NotClaimed(Exception):
    pass


def claim(job_id: int, where: Mapping[str, str] | None = None) -> bool:
    """QUEUED -> RUNNING, holding the server's slot; False when the slot is taken, the job
    is not queued, or an older queued job of the same server comes first. ``where``: the
    claiming worker, its host and queue (`queues.claimed_by`), recorded with the claim."""
    job = Sweep.objects.filter(pk=job_id, state=State.QUEUED).first()
    if job is None:
        return False
    SweepSlot.objects.get_or_create(server=job.server)
    now = timezone.now()
    try:
        with transaction.atomic():
            if _ahead_of(job).exists():
                raise _NotClaimed
            took = SweepSlot.objects.filter(server=job.server, sweep__isnull=True).update(
                sweep=job_id, claimed_at=now
            )
            if not took:
                raise _NotClaimed
            started = Sweep.objects.filter(pk=job_id, state=State.QUEUED).update(
                state=State.RUNNING,
                started_at=now,
                heartbeat_at=now,
                finished_at=None,
                error="",
                cancel_requested=False,
                waiting_for_worker=False,
                **dict(where or {}),
            )
            if not started:
                raise _NotClaimed  # rolls the slot back too
    except _NotClaimed:
        return False
    Sweep.objects.filter(pk=job_id).update(attempts=job.attempts + 1)
    return True


def release(job_id: int) -> bool:
    """Free the slot this job holds (no-op when it holds none)."""
    return bool(SweepSlot.objects.filter(sweep_id=job_id).update(sweep=None, claimed_at=None))


# --- running ----------------------------------------------------------------------------------


class Heartbeat(threading.Thread):
    """Beats the heartbeat and reads the cancel flag, off the work's event loop."""

    def __init__(self, job_id: int) -> None:
        super().__init__(name=f"job-{job_id}-heartbeat", daemon=True)
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
                        if not Sweep.objects.filter(pk=self.job_id, state=State.RUNNING).update(
                            heartbeat_at=timezone.now()
                        ):
                            self.lost = True
                    flag = (
                        Sweep.objects.filter(pk=self.job_id)
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


def run(job_id: int, where: Mapping[str, str] | None = None) -> str:
    """Claim the job's server and run the job to its end; 'waiting' when the server is busy
    (the job that holds it dispatches this one when it ends)."""
    if not claim(job_id, where):
        return "waiting"
    return execute(job_id)


def server_of(job: Sweep) -> Server:
    """The server the job runs on; JobError when it was removed since the job was queued."""
    try:
        return servers.get(job.server)
    except servers.UnknownServer as exc:
        raise JobError(f"{exc.message}: it was removed since the {job.kind} was queued") from None


def record_server_facts(job: Sweep) -> None:
    """The server's facts as the job starts (Triton version, GPUs), for later compares."""
    from repository_app.server_facts import describe

    server = server_of(job)
    # The labels as they are now (e.g. gpu=H200): compares across servers list them.
    job.server_facts = {**describe(server), "labels": dict(server.labels)}
    Sweep.objects.filter(pk=job.pk).update(server_facts=job.server_facts)


def execute(job_id: int) -> str:
    """Run a job this process has claimed, to its end; returns the final state. Never
    leaves it RUNNING: every way out goes through `finish`."""
    job = Sweep.objects.select_related("created_by").get(pk=job_id)
    kind = kind_of(job)
    try:
        record_server_facts(job)
    except JobError as exc:
        return finish(job_id, Outcome(State.FAILED, str(exc)))
    except Exception as exc:  # noqa: BLE001 - the facts are a note: the job runs without them
        log.warning("%s #%s: server facts not recorded: %s", kind.noun, job_id, exc)
    publish_state(job)
    heartbeat = Heartbeat(job_id)
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
    return finish(job_id, outcome)


def finish(job_id: int, outcome: Outcome) -> str:
    """RUNNING -> a final state (only from RUNNING: a job the watchdog already declared
    interrupted stays so), with the kind's summary; frees the slot, starts the next job."""
    updated = Sweep.objects.filter(pk=job_id, state=State.RUNNING).update(
        state=outcome.state, error=outcome.error, finished_at=timezone.now()
    )
    job = Sweep.objects.select_related("created_by").get(pk=job_id)
    if updated:
        job.summary = kind_of(job).summary(job)
        Sweep.objects.filter(pk=job_id).update(summary=job.summary)
    release(job_id)
    if updated:
        publish_state(job)
        kind_of(job).ended(job, by_worker=True)
    dispatch_next(job.server)
    return job.state


def interrupt(job: Sweep, message: str) -> bool:
    """RUNNING -> INTERRUPTED when its heartbeat is still the stale one read (the
    watchdog's step); frees the slot, leaves the kind's summary, starts the next job."""
    if not Sweep.objects.filter(
        pk=job.pk, state=State.RUNNING, heartbeat_at=job.heartbeat_at
    ).update(state=State.INTERRUPTED, error=message, finished_at=timezone.now()):
        return False
    release(job.pk)
    job.refresh_from_db()
    job.summary = kind_of(job).summary(job)
    Sweep.objects.filter(pk=job.pk).update(summary=job.summary)
    publish_state(job)
    kind_of(job).ended(job, by_worker=False)
    dispatch_next(job.server)
    return True


@shared_task(name="profiler_app.run_job", ignore_result=True, bind=True)
def run_job_task(self: Any, job_id: int) -> str:
    """The one Celery task: any kind of job (see the module's docstring)."""
    return run(job_id, queues.claimed_by(self.request))


# --- user actions -----------------------------------------------------------------------------


def cancel(job_id: int) -> str:
    """A queued job is cancelled at once; a running one is asked to stop (within a window)."""
    job = Sweep.objects.filter(pk=job_id).first()
    noun = kind_of(job).noun if job is not None else "job"
    if Sweep.objects.filter(pk=job_id, state=State.QUEUED).update(
        state=State.CANCELLED, finished_at=timezone.now(), cancel_requested=True
    ):
        job = Sweep.objects.get(pk=job_id)
        publish_state(job)
        kind_of(job).ended(job, by_worker=False)
        return "Cancelled before it started."
    if Sweep.objects.filter(pk=job_id, state=State.RUNNING).update(cancel_requested=True):
        publish_state(Sweep.objects.get(pk=job_id))
        return f"Cancelling: the {noun} stops within one measurement window."
    raise JobError(f"only a queued or running {noun} can be cancelled")


def resume(job_id: int) -> Sweep:
    """Queue a failed/cancelled/interrupted job again; it does only what is missing."""
    job = Sweep.objects.filter(pk=job_id).first()
    noun = kind_of(job).noun if job is not None else "job"
    with transaction.atomic():
        updated = Sweep.objects.filter(pk=job_id, state__in=Sweep.RESUMABLE).update(
            state=State.QUEUED,
            queued_at=timezone.now(),
            cancel_requested=False,
            error="",
            finished_at=None,
            # Not claimed yet: the worker of the last attempt is not this one's.
            worker="",
            worker_host="",
        )
        if not updated:
            raise JobError(f"only a failed, cancelled or interrupted {noun} can be resumed")
        transaction.on_commit(lambda: dispatch(job_id))
    job = Sweep.objects.get(pk=job_id)
    publish_state(job)
    return job


# --- events -----------------------------------------------------------------------------------


def publish_state(job: Sweep) -> None:
    events.publish(
        job.group,
        "sweep.state",
        {
            "sweep": job.pk,
            "kind": job.kind,
            "state": job.state,
            "error": job.error,
            "cancel_requested": job.cancel_requested,
            "queue_position": queue_position(job),
            "placement": placement_json(job),
        },
    )


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment else None


def placement_json(job: Sweep) -> dict[str, Any]:
    """Where the job's task went and why, and the worker (and host) that claimed it."""
    return {
        "server_queue": queues.queue_name(job.server),
        "queue": job.queue,
        "routing": job.routing,
        "waiting_for_worker": job.waiting_for_worker,
        "worker": job.worker,
        "worker_host": job.worker_host,
    }


def lifecycle_json(job: Sweep) -> dict[str, Any]:
    """Where a job is in its life, as the sweep and the search JSON both show it."""
    return {
        "placement": placement_json(job),
        "state": job.state,
        "error": job.error,
        "cancel_requested": job.cancel_requested,
        "queue_position": queue_position(job),
        "created_by": job.created_by.get_username() if job.created_by else "",
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "heartbeat_at": _iso(job.heartbeat_at),
        "heartbeat_stale": heartbeat_stale(job),
    }


def heartbeat_stale(job: Sweep) -> bool:
    """A RUNNING job whose heartbeat stopped: what a page says while the watchdog (in the
    workers) has not yet declared it interrupted; reading pages never change a job."""
    if job.state != State.RUNNING:
        return False
    last = job.heartbeat_at or job.started_at
    return last is not None and (timezone.now() - last).total_seconds() > STALE_AFTER_S
