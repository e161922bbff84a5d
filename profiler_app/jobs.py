"""Sweeps and config searches as jobs of the one lifecycle (`jobs.lifecycle`).

A job of this app is a `Sweep` row with a `kind` (a sweep, `profiler_app.sweep_run`; a
config search, `profiler_app.search.runner`); each kind supplies its time limits, its
work, the summary it leaves and what it announces (`JobKind`), and registers here when its
module is imported (`ProfilerAppConfig.ready`). What this module adds to the lifecycle:
- One job runs per Triton server at a time, in one FIFO queue whatever its kind: the claim
  takes the server's `SweepSlot` (free -> this job), only for the head of the queue, in the
  lifecycle's claim transaction.
- A task that cannot claim returns at once: a queued job never holds a worker process.
  The job that ends (or the watchdog that declares one interrupted) frees the slot and
  dispatches the next queued job of that server.
- A job records its server's facts (version, GPUs) each time it starts.
- `resume` queues a failed/cancelled/interrupted job again; the kind measures only what
  is missing.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from common.redact import redact
from jobs import lifecycle, queues
from jobs.lifecycle import (
    REDISPATCH_AFTER_S,
    STALE_AFTER_S,
    Heartbeat,
    JobError,
    Outcome,
    heartbeat_stale,
)
from jobs.queues import Route
from registry import servers
from registry.servers import Server
from repository_app import events

from .models import Sweep, SweepSlot

log = logging.getLogger(__name__)

State = Sweep.State
__all__ = ["REDISPATCH_AFTER_S", "STALE_AFTER_S", "Heartbeat", "JobError", "Outcome"]


class QueueUnavailable(JobError):
    """The broker (Redis) does not answer: nothing was queued."""


class JobKind(Protocol):
    """What one kind of sweep-table job supplies; the lifecycle around it is the one of
    `jobs.lifecycle`, with this module's server slot."""

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


class OnItsServer:
    """A kind of this app as the one lifecycle sees it: a `Sweep` row that holds its
    server's slot while it runs."""

    model = Sweep
    resume_hint = "measures the missing levels"

    def __init__(self, kind: JobKind) -> None:
        self.kind = kind
        self.name = kind.name
        self.noun = kind.noun

    def rows(self) -> QuerySet[Sweep]:
        return Sweep.objects.filter(kind=self.name)

    def route(self, job: Sweep) -> Route:
        return route_of(job)

    def time_limits(self, job: Sweep) -> tuple[int, int]:
        return self.kind.time_limits(job)

    def take(self, job: Sweep) -> bool:
        if _ahead_of(job).exists():
            return False
        SweepSlot.objects.get_or_create(server=job.server)
        return bool(
            SweepSlot.objects.filter(server=job.server, sweep__isnull=True).update(
                sweep=job.pk, claimed_at=timezone.now()
            )
        )

    def give_back(self, job: Sweep) -> None:
        release(job.pk)
        dispatch_next(job.server)

    def run(self, job: Sweep, heartbeat: Heartbeat) -> Outcome:
        try:
            record_server_facts(job)
        except JobError as exc:
            return Outcome(State.FAILED, str(exc))
        except Exception as exc:  # noqa: BLE001 - the facts are a note: the job runs without them
            log.warning("%s #%s: server facts not recorded: %s", self.noun, job.pk, exc)
        publish_state(job)
        return self.kind.run(Sweep.objects.select_related("created_by").get(pk=job.pk), heartbeat)

    def publish(self, job: Sweep) -> None:
        publish_state(job)

    def ended(self, job: Sweep, *, by_worker: bool) -> None:
        if job.state != State.CANCELLED or by_worker:  # a queued job cancelled ran nothing
            job.summary = self.kind.summary(job)
            Sweep.objects.filter(pk=job.pk).update(summary=job.summary)
        self.kind.ended(job, by_worker=by_worker)

    def waiting(self) -> list[Sweep]:
        heads = []
        for server in set(self.rows().filter(state=State.QUEUED).values_list("server", flat=True)):
            head = queued(server).first()
            if running_on(server) is None and head is not None and head.kind == self.name:
                heads.append(head)
        return heads

    def tidy(self) -> None:
        # Slots held by jobs that no longer run (e.g. cancelled while queued and claimed).
        SweepSlot.objects.filter(sweep__isnull=False).exclude(sweep__state=State.RUNNING).update(
            sweep=None, claimed_at=None
        )
        self.kind.tidy()


def register(kind: JobKind) -> JobKind:
    KINDS[kind.name] = kind
    lifecycle.register(OnItsServer(kind))
    return kind


def kind_of(job: Sweep) -> JobKind:
    return KINDS[job.kind]


def _lifecycle_kind(job_id: int) -> lifecycle.Kind:
    kind = Sweep.objects.filter(pk=job_id).values_list("kind", flat=True).first()
    return lifecycle.KINDS[str(kind or Sweep.Kind.SWEEP)]


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
    return servers.job_route(job.server)


def dispatch(job_id: int) -> bool:
    """Send the task of a QUEUED job to its queue (`lifecycle.dispatch`)."""
    return lifecycle.dispatch(_lifecycle_kind(job_id), job_id)


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


def claim(job_id: int, where: Mapping[str, str] | None = None) -> bool:
    """QUEUED -> RUNNING, holding the server's slot; False when the slot is taken, the job
    is not queued, or an older queued job of the same server comes first. ``where``: the
    claiming worker, its host and queue (`queues.claimed_by`), recorded with the claim."""
    return lifecycle.claim(_lifecycle_kind(job_id), job_id, where)


def release(job_id: int) -> bool:
    """Free the slot this job holds (no-op when it holds none)."""
    return bool(SweepSlot.objects.filter(sweep_id=job_id).update(sweep=None, claimed_at=None))


# --- running ----------------------------------------------------------------------------------


def run(job_id: int, where: Mapping[str, str] | None = None) -> str:
    """Claim the job's server and run the job to its end; 'waiting' when the server is busy
    (the job that holds it dispatches this one when it ends)."""
    return lifecycle.run(_lifecycle_kind(job_id), job_id, where)


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
    """Run a job this process has claimed, to its end; returns the final state."""
    return lifecycle.execute(_lifecycle_kind(job_id), job_id)


def finish(job_id: int, outcome: Outcome) -> str:
    """RUNNING -> a final state, with the kind's summary; frees the slot, starts the next."""
    return lifecycle.finish(_lifecycle_kind(job_id), job_id, outcome)


def interrupt(job: Sweep, message: str) -> bool:
    """RUNNING -> INTERRUPTED when its heartbeat is still the stale one read."""
    return lifecycle.interrupt(_lifecycle_kind(job.pk), job, message)


run_job_task = lifecycle.run_task


# --- user actions -----------------------------------------------------------------------------


def cancel(job_id: int) -> str:
    """A queued job is cancelled at once; a running one is asked to stop (within a window)."""
    kind = _lifecycle_kind(job_id)
    if lifecycle.cancel(kind, job_id):
        return "Cancelled before it started."
    return f"Cancelling: the {kind.noun} stops within one measurement window."


def resume(job_id: int) -> Sweep:
    """Queue a failed/cancelled/interrupted job again; it does only what is missing."""
    kind = _lifecycle_kind(job_id)
    with transaction.atomic():
        if not lifecycle.requeue(kind, job_id):
            raise JobError(f"only a failed, cancelled or interrupted {kind.noun} can be resumed")
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


def placement_json(job: Sweep) -> dict[str, Any]:
    """Where the job's task went and why, and the worker (and host) that claimed it."""
    return lifecycle.placement_json(job, queues.queue_name(job.server))


def lifecycle_json(job: Sweep) -> dict[str, Any]:
    """Where a job is in its life, as the sweep and the search JSON both show it."""
    return {
        "placement": placement_json(job),
        "state": job.state,
        "error": job.error,
        "cancel_requested": job.cancel_requested,
        "queue_position": queue_position(job),
        "created_by": job.created_by.get_username() if job.created_by else "",
        "started_at": lifecycle.iso(job.started_at),
        "finished_at": lifecycle.iso(job.finished_at),
        "heartbeat_at": lifecycle.iso(job.heartbeat_at),
        "heartbeat_stale": heartbeat_stale(job),
    }
