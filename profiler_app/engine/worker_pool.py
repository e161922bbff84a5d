"""One host's load worker processes: how many, with which client and how many paced
threads (`host_plan`, measured against perf_analyzer), how a level is shared among them
(`split_load`), and the processes themselves (`WorkerPool`).

The worker side of the exchange is `load_workers`; the sweep that drives a pool level by
level is `loadgen`, and `remote.CompositePool` puts several hosts' pools behind the same
calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..params import SweepError, SweepParams
from .sequences import SequenceSpec
from .worker_requests import WorkerSpec

RATE_PROCESSES = 4  # the paced threads are spread over at most this many processes
LEVEL_LEAD_NS = 5_000_000  # a new request-rate level's first send, after the message


class WorkerPool:
    """Worker processes started as `python -m ...load_workers FD` over a socket pair.

    Not multiprocessing's spawn: that re-imports the caller's __main__, which breaks
    scripts and REPLs; a plain subprocess imports only the worker module.
    One worker per entry of `rate_threads`, its paced threads for request-rate mode; a
    worker's share of a request rate follows its share of the threads. `worker_base`
    numbers the workers after those of the hosts before this one (their checked calls'
    sequence ids differ).
    """

    def __init__(self, spec: WorkerSpec, rate_threads: Sequence[int], worker_base: int = 0) -> None:
        self.conns: list[Connection] = []
        self.procs: list[subprocess.Popen] = []
        self.rate_threads = list(rate_threads)
        self.sequences = spec.sequence is not None
        root = Path(__file__).resolve().parents[2]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        }
        for i, threads in enumerate(self.rate_threads):
            parent, child = socket.socketpair()
            proc = subprocess.Popen(
                [sys.executable, "-m", "profiler_app.engine.load_workers", str(child.fileno())],
                pass_fds=(child.fileno(),),
                env=env,
                cwd=root,
            )
            child.close()
            conn = Connection(parent.detach())
            worker = replace(spec, rate_threads=threads)
            if spec.sequence is not None:  # its checked call's id differs from the others'
                worker = replace(worker, sequence=replace(spec.sequence, worker=worker_base + i))
            conn.send(worker)
            self.conns.append(conn)
            self.procs.append(proc)

    async def _recv(self, conn: Any, timeout: float) -> Any:
        loop = asyncio.get_running_loop()
        ready = await loop.run_in_executor(None, conn.poll, timeout)
        if not ready:
            raise SweepError("a load worker stopped answering")
        try:
            return conn.recv()
        except (EOFError, OSError):
            raise SweepError("a load worker exited unexpectedly") from None

    async def started(self, timeout: float = 60.0) -> Any:
        replies = await asyncio.gather(*(self._recv(c, timeout) for c in self.conns))
        for kind, payload in replies:
            if kind == "error":
                raise SweepError(payload)
        return replies[0][1]

    def set_level(
        self, kind: str, value: float, arrival: str, seed: int, offset_ns: int = 0
    ) -> None:
        # Request rate: the workers' schedules start together, each offset by one gap of
        # the whole rate, so that N constant streams interleave instead of sending in bursts
        # (`offset_ns`: this host's place among the hosts').
        first = time.monotonic_ns() + LEVEL_LEAD_NS + offset_ns
        gap = int(1e9 / value) if kind == "request_rate" and value > 0 else 0
        if kind == "request_rate":
            total = sum(self.rate_threads)
            shares = [value * n / total for n in self.rate_threads]
        else:
            shares = split_load(kind, value, len(self.conns))
        for i, (conn, share) in enumerate(zip(self.conns, shares, strict=True)):
            conn.send(("level", kind, share, arrival, seed * 1000 + i, first + i * gap))

    async def start_sequences(self, params: SweepParams, level: float) -> None:
        """Sequence models, before each level: every worker ends its live sequences (all of
        them, before any starts a new one: ids never overlap) and takes its share of the
        level's statuses, numbered across the workers: the concurrency's slots, or the
        --num-of-sequences in request-rate mode (shared like the paced threads)."""
        total = int(level if params.mode == "concurrency" else params.num_of_sequences)
        await self.assign_sequences(0, total, total, params.seed, level)

    async def assign_sequences(
        self, first: int, count: int, total: int, seed: int, level: float
    ) -> None:
        """Statuses first..first+count-1 of `total` (this host's), shared among the workers
        as the level's slots are."""
        counts = [int(n) for n in split_load("concurrency", count, len(self.conns))]
        for conn, n in zip(self.conns, counts, strict=True):
            conn.send(("sequences", first, n, total, seed, level))
            first += n
        replies = await asyncio.gather(*(self._recv(c, 60.0) for c in self.conns))
        for kind, payload in replies:
            if kind == "error":
                raise SweepError(f"ending the sequences of the last level: {payload}")

    async def swap(self, t_end: int) -> list[tuple]:
        for conn in self.conns:
            conn.send(("swap", t_end))
        return list(await asyncio.gather(*(self._recv(c, 30.0) for c in self.conns)))

    def stop(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(("stop",))
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for conn in self.conns:
            conn.close()


def split_load(kind: str, value: float, workers: int) -> list[float]:
    """Share a concurrency (whole requests) or a request rate among workers."""
    if workers <= 1:
        return [value]
    if kind == "concurrency":
        whole = int(value)
        return [float(whole // workers + (1 if i < whole % workers else 0)) for i in range(workers)]
    return [value / workers] * workers


# --- the plan ---------------------------------------------------------------------------------


def client_plan(params: SweepParams) -> tuple[str, int]:
    """(client, worker processes) for the sweep.

    Measured on the 2-core box against perf_analyzer (benchmarks/bench_engine.py): blocking
    calls, one thread per outstanding request, keep pace with it up to 16 outstanding
    requests; one process per request up to 4, then about 4 threads per process (more
    processes than cores only add scheduling). Beyond 16 aio tasks amortise wake-ups over
    several completions. Request-rate mode uses `max_threads` paced threads (at most that
    many requests outstanding, perf_analyzer's --max-threads and its default of 4 there),
    one process each up to RATE_PROCESSES: threads of one process that wake together wait
    for each other's GIL, which showed as a longer tail than perf_analyzer's C++ threads.
    """
    if params.streaming:  # streams live on a worker's event loop
        return "aio", max(1, params.workers)
    if params.client != "auto":
        return params.client, max(1, params.workers)
    if params.mode == "request_rate":
        return "threads", max(params.workers, min(RATE_PROCESSES, params.max_threads))
    if params.end <= 4:
        return "threads", max(params.workers, int(params.end))
    if params.end <= 16:
        return "threads", max(params.workers, math.ceil(params.end / 4))
    return "aio", max(1, params.workers)


def host_params(params: SweepParams, host: int, hosts: int) -> SweepParams:
    """The parameters host `host` of `hosts` plans its workers on: its share of the range's
    end (concurrency), of --max-threads and of --num-of-sequences (request rate)."""
    if hosts <= 1:
        return params

    def share(value: float) -> int:
        return int(split_load("concurrency", value, hosts)[host])

    return replace(
        params,
        end=share(params.end) if params.mode == "concurrency" else params.end,
        max_threads=share(params.max_threads),
        num_of_sequences=share(params.num_of_sequences),
    )


def host_plan(
    params: SweepParams, sequence: SequenceSpec | None, host: int = 0, hosts: int = 1
) -> tuple[str, list[int]]:
    """(client, paced threads of each worker process) of one host: one entry per worker."""
    share = host_params(params, host, hosts)
    client, workers = client_plan(share)
    rate_threads = share.max_threads
    if sequence is not None and share.mode == "request_rate":
        # perf_analyzer's too: no more threads than sequences, no worker without one.
        rate_threads = min(rate_threads, share.num_of_sequences)
        workers = min(workers, share.num_of_sequences)
    if share.mode == "request_rate" and client == "threads":
        workers = min(workers, rate_threads)  # no worker without a thread
    # The paced threads (request-rate mode), shared out like a concurrency.
    return client, [int(n) for n in split_load("concurrency", rate_threads, workers)]
