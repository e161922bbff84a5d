"""The heartbeat watchdog: a job whose worker died is marked interrupted.

A running job (sweep or config search) beats `heartbeat_at` every 2 s (`jobs.Heartbeat`).
`check()` marks every RUNNING job whose heartbeat is older than `STALE_AFTER_S` as
INTERRUPTED (`jobs.interrupt`: the slot is freed, the job's kind leaves its own summary,
the next queued job is dispatched); it frees slots held by jobs that no longer run,
re-dispatches a queued job whose task went missing, routes again a job held for its
server's own worker (`profiler_app.queues`: a worker that appears later picks it up on
the next pass), and lets each kind tidy what a dead worker left (a config search restores the model's saved config). Every step is a
conditional UPDATE, so any number of checkers may run at once.

It runs as a thread in each Celery worker's main process (started on `worker_ready`,
every `CHECK_EVERY_S`), so a dead worker is noticed within STALE_AFTER_S + CHECK_EVERY_S
(< 60 s) while any worker lives. Pages only read: they show a running job whose
heartbeat stopped as such (`jobs.heartbeat_stale`) until a watchdog declares it. The same
pass ends the rollouts whose process stopped (`rollouts.runner.reap_stopped`; only a worker
on that process's host can tell).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import connections
from django.db.models import Q
from django.utils import timezone

from . import jobs
from .jobs import STALE_AFTER_S
from .models import Sweep, SweepSlot

log = logging.getLogger(__name__)

CHECK_EVERY_S = 10.0


def check() -> list[int]:
    """One pass; returns the ids of the jobs it marked interrupted."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=STALE_AFTER_S)
    interrupted = []
    stale = Sweep.objects.filter(state=Sweep.State.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    for job in stale:
        last = job.heartbeat_at or job.started_at
        message = (
            f"interrupted: the worker stopped sending heartbeats (last at "
            f"{last:%Y-%m-%d %H:%M:%S} UTC); resume measures the missing levels"
        )
        if jobs.interrupt(job, message):
            interrupted.append(job.pk)
    # Slots held by jobs that no longer run (e.g. cancelled while queued and claimed).
    SweepSlot.objects.filter(sweep__isnull=False).exclude(sweep__state=Sweep.State.RUNNING).update(
        sweep=None, claimed_at=None
    )
    # Queued jobs whose server is free: the head of each queue gets (another) task when
    # its last one is older than REDISPATCH_AFTER_S or was never sent (held for its
    # server's own worker: routed again on every pass).
    redispatch_before = now - timedelta(seconds=jobs.REDISPATCH_AFTER_S)
    servers = set(Sweep.objects.filter(state=Sweep.State.QUEUED).values_list("server", flat=True))
    for server in servers:
        if jobs.running_on(server) is not None:
            continue
        head = jobs.queued(server).first()
        if head is None:
            continue
        if (
            head.waiting_for_worker
            or head.dispatched_at is None
            or head.dispatched_at < redispatch_before
        ):
            jobs.dispatch(head.pk)
    for kind in jobs.KINDS.values():
        kind.tidy()
    if settings.RECORD_OUTSIDE_EDITS:
        record_outside_edits()
    # Rollouts whose web process stopped mid-way (their pages only read).
    from repository_app.rollouts.runner import reap_stopped

    reap_stopped()
    return interrupted


def record_outside_edits() -> int:
    """config.pbtxt edited outside the dashboard goes into the history here, once per
    repository (servers may share one), not when a page is opened: pages only read."""
    from repository_app import servers
    from repository_app.editor import saving

    seen: set[str] = set()
    recorded = 0
    for server in servers.all():
        key = servers.repository_key(server)
        if key in seen:
            continue
        seen.add(key)
        try:
            recorded += len(saving.record_outside_edits(server))
        except Exception as exc:  # noqa: BLE001 - one repository's trouble stops no other
            log.warning("recording edits made outside the dashboard in %s: %s", key, exc)
    return recorded


class _Thread(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="job-watchdog", daemon=True)
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(CHECK_EVERY_S):
            try:
                check()
            except Exception as exc:  # noqa: BLE001 - keep watching
                log.warning("job watchdog: %s", exc)
            finally:
                connections.close_all()


_thread: _Thread | None = None


def start_in_background() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = _Thread()
        _thread.start()


def stop_background() -> None:
    if _thread is not None:
        _thread.stop_event.set()
