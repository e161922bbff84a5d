"""A sweep's load hosts' session on Redis, as both ends see it: its keys, the connection,
the heartbeat that keeps each end's key alive, and the clocks that turn one host's
boundaries into another's.

Redis keys (`Keys`), under loadgen:<job>:<session>, each with a TTL and deleted at the end:
the coordinator's `alive` key (refreshed every BEAT_S; when it is gone the agents stop),
each agent's `agent:<i>` key (likewise: when it is gone the coordinator fails the sweep
naming that host), the `seats` counter (an agent's number; one beyond N - 1 leaves), the
`joins` list, and per agent a command list and a reply list. loadgen:<job>:session names
the session for agents that take only the job id.

A boundary crosses hosts in wall-clock time (`to_wall`), and each host turns it into its
own CLOCK_MONOTONIC time (`to_monotonic`); the hosts' clocks are assumed synchronised (NTP).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import redis

log = logging.getLogger(__name__)

LEVEL_START_LEAD_NS = 200_000_000  # a level is announced this long before it starts
BEAT_S = 1.0  # each side refreshes its key this often
ALIVE_TTL_S = 10  # ... which lives this long after the last refresh
KEY_TTL_S = 3600  # the lists' safety net: the coordinator deletes them when it ends
BOUNDARY_WAIT_MAX_S = 2.0  # an agent whose clock is behind waits this long at most
POLL_S = 1.0  # blocking reads wake this often to see the other side's key


# --- clocks -------------------------------------------------------------------------------------


def to_wall(mono_ns: int, *, now_wall_ns: int | None = None, now_mono_ns: int | None = None) -> int:
    """This host's CLOCK_MONOTONIC time `mono_ns` as wall-clock ns (time.time_ns())."""
    if now_wall_ns is None or now_mono_ns is None:
        now_mono_ns, now_wall_ns = time.monotonic_ns(), time.time_ns()
    return now_wall_ns + (mono_ns - now_mono_ns)


def to_monotonic(
    wall_ns: int, *, now_wall_ns: int | None = None, now_mono_ns: int | None = None
) -> int:
    """Wall-clock ns (another host's boundary) as this host's CLOCK_MONOTONIC time."""
    if now_wall_ns is None or now_mono_ns is None:
        now_mono_ns, now_wall_ns = time.monotonic_ns(), time.time_ns()
    return now_mono_ns + (wall_ns - now_wall_ns)


# --- keys ---------------------------------------------------------------------------------------


def session_key(job: int) -> str:
    return f"loadgen:{job}:session"


@dataclass(frozen=True)
class Keys:
    job: int
    session: str

    @property
    def prefix(self) -> str:
        return f"loadgen:{self.job}:{self.session}"

    @property
    def alive(self) -> str:
        return f"{self.prefix}:alive"

    @property
    def seats(self) -> str:
        return f"{self.prefix}:seats"

    @property
    def joins(self) -> str:
        return f"{self.prefix}:joins"

    def agent(self, index: int) -> str:
        return f"{self.prefix}:agent:{index}"

    def commands(self, index: int) -> str:
        return f"{self.prefix}:cmd:{index}"

    def replies(self, index: int) -> str:
        return f"{self.prefix}:reply:{index}"

    def all(self, agents: int) -> list[str]:
        per_agent = [
            f(i) for i in range(1, agents + 1) for f in (self.agent, self.commands, self.replies)
        ]
        return [self.alive, self.seats, self.joins, *per_agent]


def blpop(client: redis.Redis, keys: list[Any], timeout: float) -> tuple[bytes, bytes] | None:
    return cast("tuple[bytes, bytes] | None", client.blpop(keys, timeout=timeout))


def connect(url: str) -> redis.Redis:
    # Reads block for POLL_S at most, far inside the socket timeout.
    return redis.Redis.from_url(url, socket_timeout=15, socket_connect_timeout=5)


class Beat(threading.Thread):
    """Refreshes a key every BEAT_S until stopped (or the process dies: it then expires)."""

    def __init__(self, beat: Callable[[], Any], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.beat = beat
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(BEAT_S):
            try:
                self.beat()
            except redis.RedisError as exc:  # the key expires; the other side notices
                log.warning("load hosts heartbeat: %s", exc)

    def stop(self) -> None:
        self.stopped.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(5)
