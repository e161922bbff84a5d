"""The watchdog: a job whose worker died is marked interrupted, wherever it ran.

Every running job (a sweep, a config search, a rollout's target) beats `heartbeat_at`
every 2 s (`jobs.lifecycle.Heartbeat`). `check()` runs the lifecycle's pass over every
kind (`jobs.lifecycle.check`): a RUNNING job whose heartbeat is older than STALE_AFTER_S
becomes INTERRUPTED (what it held is given back, its kind announces it), a queued job whose
task went missing or that waits for its server's own worker is routed again, and each kind
tidies what a dead worker left (a config search restores the model's saved config; sweep
slots held by jobs that no longer run are freed). Every step is a conditional UPDATE that
reads only the database, so any number of checkers may run at once, on any host.

It runs as a thread in each Celery worker's main process (started on `worker_ready`,
every `CHECK_EVERY_S`), so a dead worker is noticed within STALE_AFTER_S + CHECK_EVERY_S
(< 60 s) while any worker lives. Pages only read: they show a running job whose
heartbeat stopped as such (`lifecycle.heartbeat_stale`) until a watchdog declares it. The
same pass records config.pbtxt edits made outside the dashboard.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connections

from jobs import lifecycle

log = logging.getLogger(__name__)

CHECK_EVERY_S = 10.0


def check() -> list[int]:
    """One pass (`jobs.lifecycle.check`, for every kind of job, then the outside edits);
    returns the ids of the jobs it marked interrupted."""
    interrupted = [pk for _, pk in lifecycle.check()]
    if settings.RECORD_OUTSIDE_EDITS:
        record_outside_edits()
    return interrupted


def record_outside_edits() -> int:
    """config.pbtxt edited outside the dashboard goes into the history here, once per
    repository (servers may share one), not when a page is opened: pages only read."""
    from registry import servers
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
