"""The heartbeat watchdog: a sweep whose worker died is marked interrupted.

A running sweep beats `heartbeat_at` every 2 s (see `sweeps._Monitor`). `check()` marks
every RUNNING sweep whose heartbeat is older than `STALE_AFTER_S` as INTERRUPTED, frees
its server's slot and dispatches the next queued sweep; it also frees slots held by
sweeps that are no longer running and re-dispatches a queued sweep whose task went
missing. Every step is a conditional UPDATE, so any number of checkers may run at once.

It runs in two places: a thread in each Celery worker's main process (started on
`worker_ready`, every `CHECK_EVERY_S`), and lazily whenever a sweep page or its JSON is
read, so a dead worker is noticed within STALE_AFTER_S + CHECK_EVERY_S (< 60 s) even when
no worker is left.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.db import connections
from django.db.models import Q
from django.utils import timezone

from . import sweeps
from .models import Sweep, SweepSlot

log = logging.getLogger(__name__)

STALE_AFTER_S = 20.0
CHECK_EVERY_S = 10.0


def check() -> list[int]:
    """One pass; returns the ids of the sweeps it marked interrupted."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=STALE_AFTER_S)
    interrupted = []
    stale = Sweep.objects.filter(state=Sweep.State.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    for sweep in stale:
        last = sweep.heartbeat_at or sweep.started_at
        message = (
            f"interrupted: the worker stopped sending heartbeats (last at "
            f"{last:%Y-%m-%d %H:%M:%S} UTC); resume measures the missing levels"
        )
        if Sweep.objects.filter(
            pk=sweep.pk, state=Sweep.State.RUNNING, heartbeat_at=sweep.heartbeat_at
        ).update(state=Sweep.State.INTERRUPTED, error=message, finished_at=now):
            interrupted.append(sweep.pk)
            sweeps.release(sweep.pk)
            sweep.refresh_from_db()
            sweep.summary = sweeps.knee_summary(sweep)
            Sweep.objects.filter(pk=sweep.pk).update(summary=sweep.summary)
            sweeps.publish_state(sweep)
            sweeps.publish_summary(sweep)
            sweeps.dispatch_next(sweep.server)
    # Slots held by sweeps that no longer run (e.g. cancelled while queued and claimed).
    SweepSlot.objects.filter(sweep__isnull=False).exclude(sweep__state=Sweep.State.RUNNING).update(
        sweep=None, claimed_at=None
    )
    # Queued sweeps whose server is free: the head of each queue gets (another) task when
    # its last one is older than REDISPATCH_AFTER_S or was never sent.
    redispatch_before = now - timedelta(seconds=sweeps.REDISPATCH_AFTER_S)
    servers = set(Sweep.objects.filter(state=Sweep.State.QUEUED).values_list("server", flat=True))
    for server in servers:
        if sweeps.running_on(server) is not None:
            continue
        head = sweeps._queued(server).first()
        if head is None:
            continue
        if head.dispatched_at is None or head.dispatched_at < redispatch_before:
            sweeps.dispatch(head.pk)
    return interrupted


class _Thread(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="sweep-watchdog", daemon=True)
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(CHECK_EVERY_S):
            try:
                check()
            except Exception as exc:  # noqa: BLE001 - keep watching
                log.warning("sweep watchdog: %s", exc)
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
