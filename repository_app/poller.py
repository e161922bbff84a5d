"""One poller for all viewers: watches Triton and publishes what changed.

It runs as a thread in the Celery worker's main process (started on `worker_ready`).
A Redis lock makes it one per deployment even with several workers; the lock expires
if its worker dies, and another worker's poller takes over.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections

from . import events, history, reachability
from .status import group_index, state_json
from .triton.client import TritonError, get_client
from .triton.prometheus import MetricSample
from .triton.statistics import derive_server_metrics, summarize_all

log = logging.getLogger(__name__)
LOCK_KEY = "dashboard:poller:lock"


class Poller:
    def __init__(
        self,
        interval_s: float = 1.0,
        slow_every: int = 2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval_s = interval_s
        self.slow_every = slow_every  # statistics and metrics every N ticks
        self.clock = clock  # wall time of scrapes, for the stored history (tests freeze it)
        self.ticks = 0
        self.last_snapshot: dict[str, Any] | None = None
        self.last_stats: dict[str, Any] = {}
        self.last_metrics: tuple[float, list[MetricSample]] | None = None
        self.history = history.HistoryRecorder()
        self.last_maintained: float | None = None

    def tick(self) -> dict[str, Any]:
        """Poll once; publish the repository snapshot when it changed. Returns it."""
        client = get_client()
        try:
            index = client.repository_index()
            triton: dict[str, Any] = {"up": True, "message": ""}
            if self.last_snapshot is None or not self.last_snapshot["triton"]["up"]:
                reachability.mark_up()
        except TritonError as exc:
            index, triton = [], reachability.down_json(exc.message)
        models = {name: state_json(states) for name, states in group_index(index).items()}
        snapshot = {"triton": triton, "models": models}
        if snapshot != self.last_snapshot:
            event = events.publish(
                events.REPOSITORY_GROUP, "models.states", {**snapshot, "full": True}, snapshot=True
            )
            if event is not None:
                self.last_snapshot = snapshot
        if triton["up"] and self.ticks % self.slow_every == 0:
            self._statistics()
            self._metrics()
        self.ticks += 1
        return snapshot

    def _statistics(self) -> None:
        try:
            summaries = summarize_all(get_client().model_statistics())
        except TritonError:
            return
        for name, versions in summaries.items():
            if self.last_stats.get(name) != versions:
                self.last_stats[name] = versions
                events.publish(
                    events.model_group(name), "model.stats", {"model": name, "stats": versions}
                )

    def _metrics(self) -> None:
        try:
            samples = get_client().metrics()
        except TritonError:
            return
        now = time.monotonic()
        previous = self.last_metrics
        derived = derive_server_metrics(
            previous[1] if previous else None, samples, now - previous[0] if previous else 0
        )
        self.last_metrics = (now, samples)
        wall = self.clock()
        events.publish(events.SERVER_GROUP, "server.metrics", {"time": wall, **derived})
        if settings.HISTORY_ENABLED:
            self._record(wall, samples)

    def _record(self, wall: float, samples: list[MetricSample]) -> None:
        """Store the scrape in the history; a database error skips it, live charts go on."""
        try:
            self.history.observe(wall, samples)
            if self.last_maintained is None or wall - self.last_maintained >= (
                history.MAINTAIN_EVERY_S
            ):
                self.last_maintained = wall
                history.maintain(wall)
        except DatabaseError as exc:
            log.warning("poller: metrics history not stored (%s)", exc)

    def run(self, stop: threading.Event) -> None:
        token = uuid.uuid4().hex
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=2
        )
        ttl_ms = int(max(5.0, self.interval_s * 5) * 1000)
        while not stop.is_set():
            try:
                owner = client.get(LOCK_KEY)
                if owner is None:
                    client.set(LOCK_KEY, token, nx=True, px=ttl_ms)
                    owner = client.get(LOCK_KEY)
                if owner == token.encode():
                    client.pexpire(LOCK_KEY, ttl_ms)
                    self.tick()
            except (redis.RedisError, OSError) as exc:
                log.warning("poller: Redis unavailable (%s); retrying", exc)
            except Exception:
                log.exception("poller tick failed")
            finally:
                close_old_connections()
            stop.wait(self.interval_s)


_thread: threading.Thread | None = None
_stop = threading.Event()


def start_in_background(interval_s: float | None = None) -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    poller = Poller(interval_s or settings.TRITON_POLL_INTERVAL_S)
    _thread = threading.Thread(target=poller.run, args=(_stop,), name="triton-poller", daemon=True)
    _thread.start()


def stop_background() -> None:
    _stop.set()
