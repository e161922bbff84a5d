"""Load from several hosts for one sweep: the coordinator's side of its load agents.

A sweep with `load_hosts` N > 1 generates each level's load from N hosts: the sweep's own
worker (the coordinator, host 0, with its local `worker_pool.WorkerPool`) and N - 1 load
agents (Celery workers of the job's queue: `profiler_app.load_agents`; their loop is
`engine.agent`, their end of the session `agent_link`). `CompositePool` puts the local pool
and the agents behind the local pool's calls (`start_sequences`, `set_level`, `swap`,
`stop`), so `loadgen._measure_levels` drives one pool whatever the number of hosts:

- A level is split across the hosts first (`host_shares`: a concurrency like
  `split_load`, a request rate by the hosts' paced threads, the sequences like a
  concurrency), then by each host among its worker processes. Every host starts its share
  at the same wall-clock time, announced LEVEL_START_LEAD_NS ahead and turned by each host
  into its own CLOCK_MONOTONIC time; at a constant rate host h's schedule starts h gaps of
  the whole rate later, so the hosts' sends interleave.
- A window's boundary is the coordinator's monotonic cut in wall-clock time (`to_wall`);
  each agent turns it into its own monotonic time (`to_monotonic`), waits for it when its
  clock is behind, and cuts its records there (later ones stay for the next window, as a
  local worker's do). It answers with its workers' raw replies (latencies as int64 arrays,
  errors, messages, CPU, sends; streaming and sequence records), which join the local
  workers' replies in `merging.build_window`: samples pooled, never percentiles averaged,
  and throughput the pooled count over the coordinator's window. The hosts' clocks are
  assumed synchronised (NTP): an offset of d ms moves d ms of records between neighbouring
  windows.

What the hosts say to each other, and how it is signed, is `load_messages`; the session's
Redis keys, heartbeat and clocks are `load_session`. A message that is not signed for its
key and place is dropped here, logged once per key, and never counted.

Every wait is bounded: the agents joining (`join_timeout_s`: the sweep fails naming how
many joined and the queue that needs another worker), their start (START_TIMEOUT_S), each
window's records (REPLY_TIMEOUT_S) and their stop (STOP_TIMEOUT_S).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import msgpack
import redis

from ..params import SweepError, SweepParams
from .callbacks import call
from .load_messages import Forged, numbered, sign, verify
from .load_session import (
    ALIVE_TTL_S,
    KEY_TTL_S,
    LEVEL_START_LEAD_NS,
    POLL_S,
    Beat,
    Keys,
    blpop,
    connect,
    session_key,
    to_wall,
)
from .worker_pool import split_load

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # an agent's load workers started (as a local pool's)
REPLY_TIMEOUT_S = 30.0  # a window's records (as a local worker's)
STOP_TIMEOUT_S = 15.0
HOST_SEED_STRIDE = 1_000_003  # host h draws Poisson gaps from seed + h x this


# --- the coordinator's side -------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    index: int  # its host number, 1..N-1
    host: str  # the name it reports under (its Celery node)
    task: str = ""  # its Celery task id


class RemoteHosts:
    """The coordinator's end of the load agents of one run of a sweep."""

    def __init__(
        self,
        redis_url: str,
        job: int,
        hosts: int,
        *,
        name: str,
        queue: str,
        join_timeout_s: float,
    ) -> None:
        self.redis = connect(redis_url)
        self.keys = Keys(job, secrets.token_hex(8))
        self.wanted = hosts - 1
        self.name = name
        self.queue = queue
        self.join_timeout_s = join_timeout_s
        self.agents: list[Agent] = []
        self._sent: dict[int, int] = {}  # per agent: the commands pushed, signed in turn
        self._read: dict[int, int] = {}  # ... and the replies taken
        self._warned: set[str] = set()
        self._beat: Beat | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def hosts(self) -> int:
        return self.wanted + 1

    def open(self) -> None:
        """Announce the session (before the agents' tasks are sent) and keep it alive."""
        self._refresh()
        self._beat = Beat(self._refresh, f"loadgen-{self.keys.job}-beat")
        self._beat.start()

    def _refresh(self) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(session_key(self.keys.job), self.keys.session, ex=ALIVE_TTL_S)
        pipe.set(self.keys.alive, b"1", ex=ALIVE_TTL_S)
        pipe.execute()

    # --- joining and starting -------------------------------------------------------------------

    async def join(self, should_cancel: Callable[[], Any] | None = None) -> bool:
        """Wait (join_timeout_s at most) until N - 1 agents joined: True; False when
        `should_cancel()` (polled every POLL_S, a function or a coroutine function) said
        so meanwhile; SweepError when too few joined."""
        deadline = time.monotonic() + self.join_timeout_s
        names = {self.name}
        refused = 0
        while len(self.agents) < self.wanted and (left := deadline - time.monotonic()) > 0:
            item = await asyncio.to_thread(
                self._redis_call, blpop, self.redis, [self.keys.joins], min(POLL_S, left)
            )
            if should_cancel is not None and await call(should_cancel):
                return False
            if item is None:
                continue
            try:
                index, node, pid, task = verify(item[1], self.keys.joins)
            except Forged:
                refused += 1
                self._dropped(self.keys.joins, "an agent")
                continue
            except (ValueError, TypeError, msgpack.UnpackException):
                log.warning("load hosts: an unreadable join of sweep #%s", self.keys.job)
                continue
            # A signed join replayed in this session: its seat is taken already.
            if not 1 <= int(index) <= self.wanted or int(index) in {a.index for a in self.agents}:
                self._dropped(self.keys.joins, f"the load agent {index}")
                continue
            self._sent[int(index)] = self._read[int(index)] = 0
            host = str(node) if str(node) not in names else f"{node}/{pid}"
            names.add(host)
            self.agents.append(Agent(int(index), host, str(task)))
        self.agents.sort(key=lambda a: a.index)
        if len(self.agents) < self.wanted:
            joined = len(self.agents)
            # The likeliest cause of a refused join: a worker with another DJANGO_SECRET_KEY.
            wrong_key = (
                f"; {refused} join(s) refused for a wrong signature: every worker needs the "
                "same DJANGO_SECRET_KEY"
                if refused
                else ""
            )
            raise SweepError(
                f"only {joined} of the {self.wanted} load agents joined within "
                f"{self.join_timeout_s:g} s ({joined + 1} of {self.hosts} load hosts): start "
                f"another worker on queue {self.queue} (one per host), or lower the load hosts"
                f"{wrong_key}"
            )
        return True

    async def started(self) -> None:
        """Every agent's load workers answered their checked call (SweepError naming the
        host of one that could not start)."""
        await self.collect("ready", START_TIMEOUT_S)

    # --- messages -------------------------------------------------------------------------------

    async def send(self, messages: Sequence[tuple]) -> None:
        """One message to each agent, in the agents' order."""
        await asyncio.to_thread(self._redis_call, self._send, messages)

    def _send(self, messages: Sequence[tuple]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for agent, message in zip(self.agents, messages, strict=True):
            key = self.keys.commands(agent.index)
            pipe.rpush(key, sign(message, numbered(key, self._sent[agent.index])))
            pipe.expire(key, KEY_TTL_S)
        pipe.execute()
        for agent in self.agents:
            self._sent[agent.index] += 1

    def _dropped(self, key: str, sender: str) -> None:
        """Say once per key that forged messages on it are dropped."""
        if key not in self._warned:
            self._warned.add(key)
            log.warning(
                "sweep #%s: dropped a message from %s on %s: its signature is missing or "
                "wrong, or it was replayed (further ones on this key are dropped silently)",
                self.keys.job, sender, key,
            )  # fmt: skip

    async def collect(self, kind: str, timeout: float) -> list[tuple]:
        """Each agent's next reply, in the agents' order; SweepError naming the host of one
        that answered with an error, or did not answer within `timeout`."""
        return await asyncio.to_thread(self._redis_call, self._collect, kind, timeout)

    def _collect(self, kind: str, timeout: float, *, stopping: bool = False) -> list[tuple]:
        """`collect`'s work. When `stopping`, replies of another kind are passed over
        (records of a window the sweep gave up) and an agent whose heartbeat ended has
        stopped."""
        pending = {self.keys.replies(a.index).encode(): a for a in self.agents}
        got: dict[int, tuple] = {}
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                hosts = ", ".join(a.host for a in pending.values())
                raise SweepError(
                    f"the load agent on {hosts} stopped answering (no {kind} within {timeout:g} s)"
                )
            item = blpop(self.redis, list(pending), timeout=min(POLL_S, left))
            if item is None:
                for key, agent in list(pending.items()):
                    if self.redis.exists(self.keys.agent(agent.index)):
                        continue
                    if not stopping:
                        raise SweepError(
                            f"the load agent on {agent.host} stopped answering (its heartbeat "
                            "ended)"
                        )
                    del pending[key]
                    got[agent.index] = ("stopped",)
                continue
            agent = pending[item[0]]
            replies = self.keys.replies(agent.index)
            try:
                message = verify(item[1], numbered(replies, self._read[agent.index]))
            except Forged:
                self._dropped(replies, f"the load agent on {agent.host}")
                continue
            except (ValueError, TypeError, msgpack.UnpackException):
                raise SweepError(
                    f"the load agent on {agent.host} sent an unreadable reply"
                ) from None
            self._read[agent.index] += 1
            if stopping and message[0] != kind:
                continue
            del pending[item[0]]
            if message[0] == "error":
                raise SweepError(f"the load agent on {agent.host}: {message[1]}")
            if message[0] != kind:
                raise SweepError(
                    f"the load agent on {agent.host} answered {message[0]!r}, not {kind!r}"
                )
            got[agent.index] = message
        return [got[a.index] for a in self.agents]

    def _redis_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except redis.RedisError as exc:
            raise SweepError(f"the load agents' Redis does not answer: {exc}") from None

    # --- the end --------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the agents (waiting STOP_TIMEOUT_S at most for them to stop their workers),
        then delete every key of the session. Idempotent; never raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self.agents:
                self._send([("stop",)] * len(self.agents))
                self._collect("stopped", STOP_TIMEOUT_S, stopping=True)
        except (SweepError, redis.RedisError) as exc:
            log.warning("sweep #%s: stopping the load agents: %s", self.keys.job, exc)
        finally:
            if self._beat is not None:
                self._beat.stop()
            try:
                seats = int(cast("bytes | None", self.redis.get(self.keys.seats)) or 0)
                self.redis.delete(*self.keys.all(max(seats, self.wanted)))
                # The session key names this session only until a later one replaced it.
                if self.redis.get(session_key(self.keys.job)) == self.keys.session.encode():
                    self.redis.delete(session_key(self.keys.job))
            except redis.RedisError as exc:  # the keys expire on their own
                log.warning("sweep #%s: deleting the load agents' keys: %s", self.keys.job, exc)
            self.redis.close()

    def joined_tasks(self) -> set[str]:
        return {a.task for a in self.agents}


# --- the composite pool -----------------------------------------------------------------------


class LocalPool(Protocol):
    """What `CompositePool` needs of the coordinator's own pool (`worker_pool.WorkerPool`)."""

    sequences: bool

    def set_level(
        self, kind: str, value: float, arrival: str, seed: int, offset_ns: int = 0
    ) -> None: ...

    async def assign_sequences(
        self, first: int, count: int, total: int, seed: int, level: float
    ) -> None: ...

    async def swap(self, t_end: int) -> list[tuple]: ...

    def stop(self) -> None: ...


def host_shares(kind: str, value: float, host_threads: Sequence[int]) -> list[float]:
    """A level's value split among the hosts: a concurrency in whole requests (as
    `split_load`), a request rate in proportion to each host's paced threads (as a host
    splits its share among its workers)."""
    if kind == "request_rate":
        total = sum(host_threads)
        return [value * n / total for n in host_threads]
    return split_load(kind, value, len(host_threads))


def host_seed(seed: int, host: int) -> int:
    return seed + host * HOST_SEED_STRIDE


def host_requests(host: str, replies: Sequence[tuple]) -> dict[str, Any]:
    """One host's share of a window: its completed requests and its errors."""
    return {
        "host": host,
        "requests": int(sum(len(r[2]) for r in replies)),
        "errors": int(sum(r[3] for r in replies)),
    }


class CompositePool:
    """The local pool and the remote agents behind the local pool's calls."""

    def __init__(self, local: LocalPool, remote: RemoteHosts, host_threads: Sequence[int]) -> None:
        self.local = local
        self.remote = remote
        self.host_threads = list(host_threads)  # each host's paced threads (request rate)
        self.sequences = local.sequences
        self.last_hosts: list[dict[str, Any]] = []  # each host's share of the last window
        # What the last swap took (ms): the local workers' records, and the agents' (their
        # swap sent until every agent's records are decoded), side by side.
        self.last_cost: dict[str, float] = {}

    async def start_sequences(self, params: SweepParams, level: float) -> None:
        """Every host ends its live sequences and takes its share of the level's statuses,
        numbered across the hosts (then across each host's workers)."""
        total = int(level if params.mode == "concurrency" else params.num_of_sequences)
        counts = [int(n) for n in split_load("concurrency", total, self.remote.hosts)]
        firsts = [sum(counts[:h]) for h in range(len(counts))]
        await self.remote.send(
            [
                ("sequences", firsts[a.index], counts[a.index], total, params.seed, level)
                for a in self.remote.agents
            ]
        )
        await self.local.assign_sequences(firsts[0], counts[0], total, params.seed, level)
        await self.remote.collect("ready", START_TIMEOUT_S)

    async def set_level(self, kind: str, value: float, arrival: str, seed: int) -> None:
        """Every host starts its share at one wall-clock time, LEVEL_START_LEAD_NS ahead."""
        shares = host_shares(kind, value, self.host_threads)
        gap = int(1e9 / value) if kind == "request_rate" and value > 0 else 0
        start = time.time_ns() + LEVEL_START_LEAD_NS
        await self.remote.send(
            [
                (
                    "level",
                    kind,
                    shares[a.index],
                    arrival,
                    host_seed(seed, a.index),
                    start,
                    a.index * gap,
                )
                for a in self.remote.agents
            ]
        )
        await asyncio.sleep(max(0.0, (start - time.time_ns()) / 1e9))
        self.local.set_level(kind, shares[0], arrival, seed)

    async def swap(self, t_end: int) -> list[tuple]:
        """The window's replies of every host's workers, the local ones first."""
        started = time.perf_counter()
        boundary = to_wall(t_end)
        cost: dict[str, float] = {}

        def took(name: str) -> None:
            cost[name] = (time.perf_counter() - started) * 1000

        async def local() -> list[tuple]:
            replies = await self.local.swap(t_end)
            took("load_local_ms")
            return replies

        async def remote() -> list[tuple]:
            await self.remote.send([("swap", boundary)] * len(self.remote.agents))
            replies = await self.remote.collect("records", REPLY_TIMEOUT_S)
            took("load_collect_ms")
            return replies

        mine, agents = await asyncio.gather(local(), remote())
        self.last_cost = cost
        self.last_hosts = [host_requests(self.remote.name, mine)] + [
            host_requests(a.host, m[1]) for a, m in zip(self.remote.agents, agents, strict=True)
        ]
        return [*mine, *(r for m in agents for r in m[1])]

    def stop(self) -> None:
        try:
            self.local.stop()
        finally:
            self.remote.close()
