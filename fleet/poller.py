"""One poller per Triton server for all viewers: watches it and publishes what changed.

The pollers run as threads in each Celery worker's main process (started on
`worker_ready`): a `PollerManager` keeps one thread per known server, re-reading the list
every REFRESH_S (servers are added and removed at run time). A Redis lock per server
(`dashboard:poller:lock:<server>`) makes each server's poller one per deployment even with
several workers, and different servers may be polled by different workers; a lock expires
if its worker dies, and another worker's poller takes over. Each server has its own
thread, so a server that does not answer (each call waits up to TRITON_TIMEOUT_S) never
slows the others' polling.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections

from registry import reachability, servers
from registry.servers import Server
from registry.triton_clients import get_client
from repository_app import events, history
from repository_app.status import group_index, state_json
from triton_api.client import TritonError
from triton_api.prometheus import MetricSample
from triton_api.statistics import derive_server_metrics, summarize_all

log = logging.getLogger(__name__)
REFRESH_S = 5.0


def lock_key(server: str) -> str:
    return f"dashboard:poller:lock:{server}"


def card_key(server: str) -> str:
    return f"dashboard:poller:card:{server}"


def record_card(server: str, *, time: float, version: str, derived: dict[str, Any]) -> None:
    """What the fleet overview's card shows of one metrics scrape (``derive_server_metrics``):
    Triton's version, the requests/s of every model together, the GPUs; best effort, like
    every live update."""
    rates = [
        row["requests_per_s"]
        for row in derived.get("models", {}).values()
        if row.get("requests_per_s") is not None
    ]
    card = {
        "time": time,
        "version": version,
        "requests_per_s": round(sum(rates), 3) if rates else None,
        "gpus": [{"uuid": uuid, **figures} for uuid, figures in derived.get("gpus", {}).items()],
    }
    with contextlib.suppress(redis.RedisError, OSError):
        events._redis().set(card_key(server), json.dumps(card))


class Poller:
    def __init__(
        self,
        server: Server,
        interval_s: float = 1.0,
        slow_every: int = 2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # Replaced by the manager when the server's definition changes (a plain assignment).
        self.server = server
        self.interval_s = interval_s
        self.slow_every = slow_every  # statistics and metrics every N ticks
        self.clock = clock  # wall time of scrapes, for the stored history (tests freeze it)
        self.ticks = 0
        self.last_snapshot: dict[str, Any] | None = None
        self.last_stats: dict[str, Any] = {}
        self.last_metrics: tuple[float, list[MetricSample]] | None = None
        self.history = history.HistoryRecorder(server.name)
        self.last_maintained: float | None = None
        # Triton's version for the fleet's card: read once it answers, again after it was down.
        self.version = ""

    @property
    def name(self) -> str:
        return self.server.name

    def tick(self) -> dict[str, Any]:
        """Poll once; publish the repository snapshot when it changed. Returns it."""
        client = get_client(self.server)
        try:
            index = client.repository_index()
            triton: dict[str, Any] = {"up": True, "message": ""}
            if self.last_snapshot is None or not self.last_snapshot["triton"]["up"]:
                reachability.mark_up(self.name)
        except TritonError as exc:
            index, triton = [], reachability.down_json(self.name, exc.message)
            self.version = ""  # it may come back as another Triton
        models = {name: state_json(states) for name, states in group_index(index).items()}
        snapshot = {"triton": triton, "models": models}
        if snapshot != self.last_snapshot:
            event = events.publish(
                events.repository_group(self.name),
                "models.states",
                {**snapshot, "full": True},
                snapshot_of=self.name,
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
            summaries = summarize_all(get_client(self.server).model_statistics())
        except TritonError:
            return
        for name, versions in summaries.items():
            if self.last_stats.get(name) != versions:
                self.last_stats[name] = versions
                events.publish(
                    events.model_group(self.name, name),
                    "model.stats",
                    {"model": name, "stats": versions},
                )

    def _metrics(self) -> None:
        if not self.version:
            self.version = _version(get_client(self.server))
        try:
            samples = get_client(self.server).metrics()
        except TritonError:
            return
        now = time.monotonic()
        previous = self.last_metrics
        derived = derive_server_metrics(
            previous[1] if previous else None, samples, now - previous[0] if previous else 0
        )
        self.last_metrics = (now, samples)
        wall = self.clock()
        events.publish(events.server_group(self.name), "server.metrics", {"time": wall, **derived})
        record_card(self.name, time=wall, version=self.version, derived=derived)
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
                history.maintain(wall, self.name)
        except DatabaseError as exc:
            log.warning("poller %s: metrics history not stored (%s)", self.name, exc)

    def run(self, stop: threading.Event) -> None:
        token = uuid.uuid4().hex
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=2
        )
        ttl_ms = int(max(5.0, self.interval_s * 5) * 1000)
        key = lock_key(self.name)
        while not stop.is_set():
            try:
                owner = client.get(key)
                if owner is None:
                    client.set(key, token, nx=True, px=ttl_ms)
                    owner = client.get(key)
                if owner == token.encode():
                    client.pexpire(key, ttl_ms)
                    self.tick()
            except (redis.RedisError, OSError) as exc:
                log.warning("poller %s: Redis unavailable (%s); retrying", self.name, exc)
            except Exception:
                log.exception("poller %s: tick failed", self.name)
            finally:
                close_old_connections()
            stop.wait(self.interval_s)
        # A removed server (or a stopping worker) hands its lock over at once.
        try:
            if client.get(key) == token.encode():
                client.delete(key)
        except (redis.RedisError, OSError):
            pass


def _version(client: Any) -> str:
    try:
        return str(client.server_metadata().get("version", ""))
    except TritonError:
        return ""


class PollerManager:
    """One poller thread per known server, kept in step with the registry."""

    def __init__(
        self,
        interval_s: float,
        refresh_s: float = REFRESH_S,
        known: Callable[[], list[Server]] = servers.all,
    ) -> None:
        self.interval_s = interval_s
        self.refresh_s = refresh_s
        self.known = known
        self.running: dict[str, tuple[Poller, threading.Thread, threading.Event]] = {}

    def refresh(self) -> None:
        """Start pollers for new servers, stop those of removed ones, and hand a changed
        definition (new URLs, key) to the running poller."""
        try:
            wanted = {s.name: s for s in self.known()}
        except DatabaseError as exc:
            log.warning("pollers: the server list cannot be read (%s); keeping %s", exc,
                        ", ".join(self.running))  # fmt: skip
            return
        finally:
            close_old_connections()
        for name in list(self.running):
            if name not in wanted:
                self.running.pop(name)[2].set()
        for name, server in wanted.items():
            current = self.running.get(name)
            if current is not None and current[1].is_alive():
                if current[0].server != server:
                    current[0].server = server
                continue
            poller = Poller(server, self.interval_s)
            stop = threading.Event()
            thread = threading.Thread(
                target=poller.run, args=(stop,), name=f"triton-poller-{name}", daemon=True
            )
            self.running[name] = (poller, thread, stop)
            thread.start()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.refresh()
            except Exception:
                log.exception("pollers: refresh failed")
            stop.wait(self.refresh_s)
        self.stop_all()

    def stop_all(self) -> None:
        for _, _thread, stop in self.running.values():
            stop.set()
        for _, thread, _ in self.running.values():
            thread.join(timeout=self.interval_s + 1)
        self.running.clear()


_thread: threading.Thread | None = None
_stop = threading.Event()


def start_in_background(interval_s: float | None = None) -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    manager = PollerManager(interval_s or settings.TRITON_POLL_INTERVAL_S)
    _thread = threading.Thread(
        target=manager.run, args=(_stop,), name="triton-pollers", daemon=True
    )
    _thread.start()


def stop_background() -> None:
    _stop.set()
