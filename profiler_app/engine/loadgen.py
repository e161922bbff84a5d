"""The built-in load generator: perf_analyzer's measurement loop, in Python.

`run_sweep(params, url)` walks the levels of a concurrency or request-rate range. At each
level it cuts time windows of `measurement_window_ms`; a window counts the requests that
*completed* inside it (perf_analyzer's rule), and reports throughput (requests x batch /
window), client latency (avg, p50/p90/p95/p99 in µs), errors, client CPU per request and
Triton's server-side breakdown (statistics extension, diffed over the window). A level
ends when the last 3 windows are stable (see `stats`), or when the interval of the median
of its windows after the first is within the stability percentage (`stats.settle`: a
noisy machine's level, which keeps measuring for this), when `max_windows` is reached (its
time budget: the level is kept, marked unstable, with its spread and interval), or when
the chosen latency passes the threshold (the sweep then stops raising the load). Each
level also records how busy this machine was meanwhile (`host_load`). `should_cancel` is
polled several times per window; a cancelled sweep keeps the windows it finished.

A streaming sweep (`params.streaming`, a decoupled model) sends its requests over gRPC
streams (`stream_slots`), at a concurrency or a request rate; its windows and levels also
report response throughput, responses per request, first-response and inter-response
times and tokens (`stream_stats`), and each window the counts of its inter-response
histogram. A streamed request without its final response within STREAM_TIMEOUT_WINDOWS
windows (at least STREAM_TIMEOUT_MIN_S) is an error. With goodput objectives
(`params.goodput`) every window and level also counts the requests that met them all.

A sequence model (its config has sequence_batching) is driven sequence by sequence
(`sequences`: perf_analyzer's model, --sequence-length, --sequence-length-variation,
--sequence-id-range, and --num-of-sequences at a request rate); its windows and levels
also report requests, throughput and latencies by position in the sequence (first,
middle, last) and the sequences completed and failed.

The load itself comes from worker processes (`load_workers`), so that neither this event
loop (which also runs the callbacks, e.g. websocket pushes) nor the GIL sits on the hot
path. With `params.load_hosts` N > 1 and the load agents of a job (`hosts`), each level is
split among N hosts (`remote.CompositePool`); their windows' raw records are pooled here as
the local workers' are, and each window and level says each host's share (`load_hosts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from repository_app.triton import aio
from repository_app.triton.client import TritonError
from repository_app.triton.gpus import GpuSample

from .. import goodput, llm, measure
from ..model_kind import kind_of_served
from ..params import SweepError, SweepParams
from . import composing, gpu, host_load, stats
from .composing import StepServer
from .gpu import GpuSampler
from .inputs import InputError, build_payloads, input_specs, max_batch_size
from .load_workers import WorkerSpec, split_load
from .remote import CompositePool, RemoteHosts
from .sequences import SequenceRecords, SequenceSpec
from .stream_stats import StreamRecords

CANCEL_POLL_S = 0.1
RATE_PROCESSES = 4  # the paced threads are spread over at most this many processes
BEHIND_SCHEDULE = 0.95  # request rate: a level that sent under this share of its rate
LEVEL_LEAD_NS = 5_000_000  # a new request-rate level's first send, after the message
STREAM_TIMEOUT_WINDOWS = 2
STREAM_TIMEOUT_MIN_S = 1.0


@dataclass
class ServerBreakdown:
    """Triton's view of the window (averages in µs), from the statistics extension."""

    request_count: int
    inference_count: int
    execution_count: int
    request_us: float  # success: cumulative request time per request
    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float

    @property
    def avg_batch_size(self) -> float:
        return self.inference_count / self.execution_count if self.execution_count else 0.0


@dataclass
class WindowResult:
    level: float
    index: int  # 0-based window number within the level
    duration_s: float
    requests: int
    inferences: int
    throughput: float  # infer/s
    latency: stats.LatencySummary | None
    errors: int
    error_messages: list[str]
    server: ServerBreakdown | None
    client_cpu_us: float  # worker CPU per completed request
    send_rate: float  # requests sent per second
    closed_at: float = 0.0  # wall clock (time.time()) when the window closed
    gpu: GpuSample | None = None  # from Triton's metrics at the window's end, where it has GPUs
    # Raw latencies (ns) of the window, kept so a level pools them like perf_analyzer.
    latencies_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), repr=False)
    stream: StreamRecords | None = None  # streaming sweeps
    steps: list[StepServer] = field(default_factory=list)  # ensembles, BLS (`composing`)
    sequence: SequenceRecords | None = None  # sequence models
    good: int | None = None  # requests that met every goodput objective (None: none set)
    # Load from several hosts: each host's share ({"host", "requests", "errors"}), and what
    # closing the window cost (`remote.CompositePool.swap`'s times, and the pooling's).
    hosts: list[dict[str, Any]] | None = None
    load_cost: dict[str, float] | None = None

    def chosen_latency_us(self, chosen: int | str) -> float:
        return self.latency.value(chosen) if self.latency else 0.0

    def measured(self) -> measure.Window:
        """The window in the one shape of a measurement (`profiler_app.measure`)."""
        return measure.Window(
            level=self.level,
            throughput=self.throughput,
            requests=self.requests,
            errors=self.errors,
            duration_s=self.duration_s,
            **measure.latency_fields(self.latency),
            **measure.server_fields(self.server),
            stable=None,
            extra={
                "client_cpu_us": self.client_cpu_us,
                "send_rate": self.send_rate,
                "error_messages": self.error_messages,
                "avg_batch": self.server.avg_batch_size if self.server else None,
                # Triton's own count over the same statistics reads as the steps'.
                "server_requests": self.server.request_count if self.server else None,
                **measure.gpu_fields(self.gpu),
                **measure.stream_fields(
                    self.stream.summary(self.duration_s) if self.stream else None
                ),
                **({"steps": composing.rows(self.steps)} if self.steps else {}),
                **measure.sequence_fields(
                    self.sequence.summary(self.duration_s) if self.sequence else None
                ),
                **measure.goodput_fields(self.good, self.requests, self.duration_s),
                **(
                    {measure.INTER_RESPONSE_HISTOGRAM: self.stream.histogram()}
                    if self.stream
                    else {}
                ),
                **({"load_hosts": self.hosts, **(self.load_cost or {})} if self.hosts else {}),
            },
            window=self.index,
            closed_at=self.closed_at,
        )


@dataclass
class LevelResult:
    level: float
    windows: list[WindowResult]
    stable: bool
    throughput: float  # merged over the last 3 windows (or fewer)
    latency: stats.LatencySummary | None
    server: ServerBreakdown | None
    throughput_spread: float  # max/min - 1 over the last 3 windows
    latency_spread: float
    errors: int
    client_cpu_us: float
    over_threshold: bool = False
    cancelled: bool = False
    gpu: GpuSample | None = None  # mean utilisation, peak memory over the windows
    send_rate: float = 0.0  # requests sent per second over the last windows
    # Request-rate mode: fewer sent than the schedule asked (every thread was waiting for a
    # reply), so the server saw less load than the level says (perf_analyzer's "delayed").
    behind_schedule: bool = False
    stream: StreamRecords | None = None  # streaming sweeps: the last windows' records
    stream_duration_s: float = 0.0  # the last windows' time: response throughput, goodput
    good: int | None = None  # the last windows' requests that met every goodput objective
    steps: list[StepServer] = field(default_factory=list)  # merged like `server`
    # Sequence models: the last windows' positions, their throughput over stream_duration_s
    # (the sequences failed: every window's).
    sequence: SequenceRecords | None = None
    hosts: list[dict[str, Any]] | None = None  # each host's share of the last windows
    # How the windows settled, and the intervals of their medians (`stats.settle`); the
    # load generator's machine during the level (`host_load`).
    settling: stats.Settling | None = None
    host: host_load.HostLoad | None = None

    def measured(self) -> measure.Level:
        """The level in the one shape of a measurement (`profiler_app.measure`)."""
        return measure.Level(
            level=self.level,
            throughput=self.throughput,
            requests=self.latency.count if self.latency else 0,
            errors=self.errors,
            duration_s=sum(w.duration_s for w in self.windows),
            **measure.latency_fields(self.latency),
            **measure.server_fields(self.server),
            stable=self.stable,
            extra={
                "windows": len(self.windows),
                "throughput_spread": measure.finite(self.throughput_spread),
                "latency_spread": measure.finite(self.latency_spread),
                "over_threshold": self.over_threshold,
                "cancelled": self.cancelled,
                "client_cpu_us": self.client_cpu_us,
                "avg_batch": self.server.avg_batch_size if self.server else None,
                # Triton's own count over the same statistics reads as the steps'.
                "server_requests": self.server.request_count if self.server else None,
                "send_rate": self.send_rate,
                "behind_schedule": self.behind_schedule,
                **measure.gpu_fields(self.gpu),
                **measure.stream_fields(
                    self.stream.summary(self.stream_duration_s) if self.stream else None
                ),
                **({"steps": composing.rows(self.steps)} if self.steps else {}),
                **measure.sequence_fields(
                    self.sequence.summary(self.stream_duration_s) if self.sequence else None
                ),
                **measure.goodput_fields(
                    self.good, self.latency.count if self.latency else 0, self.stream_duration_s
                ),
                **({"load_hosts": self.hosts} if self.hosts else {}),
                **measure.interval_fields(self.settling),
                **({measure.HOST: self.host.to_json()} if self.host else {}),
            },
        )


@dataclass
class SweepResult:
    params: SweepParams
    levels: list[LevelResult]
    cancelled: bool = False
    stopped_reason: str = ""  # "", "cancelled", "latency threshold", "error: ..."
    outputs: Any = None

    def curve(self) -> list[stats.CurvePoint]:
        key = measure.latency_key(self.params.percentile)
        points = (lv.measured().curve_point(key) for lv in self.levels)
        return [p for p in points if p is not None]

    def recommendation(
        self, *, min_gain_pct: float = 5.0, latency_budget_ms: float | None = None
    ) -> str:
        return stats.recommendation(
            self.curve(),
            mode=self.params.mode,
            latency_label=self.params.latency_label,
            min_gain_pct=min_gain_pct,
            latency_budget_ms=latency_budget_ms or self.params.latency_threshold_ms,
        )


Callback = Callable[[Any], Awaitable[None] | None]


async def _call(callback: Callable[..., Any] | None, *args: Any) -> Any:
    if callback is None:
        return None
    result = callback(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def _server_diff(
    start: Mapping[str, int] | None, end: Mapping[str, int] | None
) -> ServerBreakdown | None:
    if not start or not end:
        return None
    d = {k: end[k] - start.get(k, 0) for k in end}

    def avg(key: str) -> float:
        count = d[f"{key}_count"]
        return d[f"{key}_ns"] / count / 1000 if count else 0.0

    return ServerBreakdown(
        request_count=d["success_count"],
        inference_count=d["inference_count"],
        execution_count=d["execution_count"],
        request_us=avg("success"),
        queue_us=avg("queue"),
        compute_input_us=avg("compute_input"),
        compute_infer_us=avg("compute_infer"),
        compute_output_us=avg("compute_output"),
    )


def _merge_server(items: Sequence[ServerBreakdown | None]) -> ServerBreakdown | None:
    """Windows merged as perf_analyzer merges them (counts and durations added up): each
    average weighted by the requests it is over. Triton counts queue and compute once per
    request, not per execution (a batch of 8 adds 8 to compute_infer's count)."""
    present = [s for s in items if s is not None]
    if not present:
        return None

    def weighted(attr: str) -> float:
        total = sum(s.request_count for s in present)
        return sum(getattr(s, attr) * s.request_count for s in present) / total if total else 0.0

    return ServerBreakdown(
        request_count=sum(s.request_count for s in present),
        inference_count=sum(s.inference_count for s in present),
        execution_count=sum(s.execution_count for s in present),
        request_us=weighted("request_us"),
        queue_us=weighted("queue_us"),
        compute_input_us=weighted("compute_input_us"),
        compute_infer_us=weighted("compute_infer_us"),
        compute_output_us=weighted("compute_output_us"),
    )


# --- worker pool ------------------------------------------------------------------------------


class _Pool:
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


# --- the sweep --------------------------------------------------------------------------------


def _client_plan(params: SweepParams) -> tuple[str, int]:
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


@dataclass
class Prepared:
    """What every host's workers send, read from Triton once per host: the requests, the
    model's steps (ensembles, BLS) and its sequences."""

    spec: WorkerSpec  # its `client` is each host's own (`host_plan`)
    plan: composing.Plan
    sequence: SequenceSpec | None


async def prepare(params: SweepParams, url: str, control: aio.AioClient) -> Prepared:
    """The workers' spec for the model at `url`; SweepError when the sweep cannot start
    (unknown or unloaded model, bad shapes, Triton unreachable)."""
    try:
        metadata, config = await control.describe(params.model, params.version)
    except TritonError as exc:
        raise SweepError(str(exc)) from None
    mbs = max_batch_size(config)
    if mbs and params.batch_size > mbs:
        raise SweepError(f"batch size {params.batch_size} exceeds the model's max_batch_size {mbs}")
    try:  # an ensemble's steps, a BLS model's calls: their statistics are read too
        plan = await composing.plan(control, params.model, config)
    except composing.StepError as exc:
        raise SweepError(str(exc)) from None
    try:
        payloads = build_payloads(
            input_specs(metadata, config),
            batch_size=params.batch_size,
            batching=mbs > 0,
            shapes=params.shapes,
            data=params.input_data
            if not isinstance(params.input_data, Path)
            else str(params.input_data),
            seed=params.seed,
        )
    except InputError as exc:
        raise SweepError(str(exc)) from None
    refused = llm.refusals(params, metadata, "builtin")  # the preflight's output check
    if refused:
        raise SweepError(next(iter(refused.values())))
    kind = kind_of_served(config.get("config", config))  # gRPC's as_json wraps it
    if kind.sequence and params.streaming:
        raise SweepError("the built-in engine does not send sequences over gRPC streams")
    sequence = SequenceSpec.of(params) if kind.sequence else None
    spec = WorkerSpec(
        protocol=params.protocol,
        url=url,
        model=params.model,
        version=params.version,
        payloads=[[(t.name, t.datatype, t.array) for t in p] for p in payloads],
        client="aio",
        streaming=params.streaming,
        stream_timeout_s=max(
            STREAM_TIMEOUT_MIN_S,
            STREAM_TIMEOUT_WINDOWS * params.measurement_window_ms / 1000,
        ),
        sequence=sequence,
        token_output=params.token_output,
    )
    return Prepared(spec, plan, sequence)


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
    client, workers = _client_plan(share)
    rate_threads = share.max_threads
    if sequence is not None and share.mode == "request_rate":
        # perf_analyzer's too: no more threads than sequences, no worker without one.
        rate_threads = min(rate_threads, share.num_of_sequences)
        workers = min(workers, share.num_of_sequences)
    if share.mode == "request_rate" and client == "threads":
        workers = min(workers, rate_threads)  # no worker without a thread
    # The paced threads (request-rate mode), shared out like a concurrency.
    return client, [int(n) for n in split_load("concurrency", rate_threads, workers)]


def host_pool(prepared: Prepared, params: SweepParams, host: int, hosts: int) -> _Pool:
    """Host `host`'s worker processes, numbered after the hosts' before it."""
    client, threads = host_plan(params, prepared.sequence, host, hosts)
    base = sum(len(host_plan(params, prepared.sequence, h, hosts)[1]) for h in range(host))
    return _Pool(replace(prepared.spec, client=client), threads, worker_base=base)


async def run_sweep(
    params: SweepParams,
    url: str,
    *,
    on_window: Callable[[WindowResult], Any] | None = None,
    on_level: Callable[[LevelResult], Any] | None = None,
    should_cancel: Callable[[], Any] | None = None,
    metrics_url: str | None = None,
    levels: Sequence[float] | None = None,
    hosts: RemoteHosts | None = None,
) -> SweepResult:
    """Run the sweep against Triton at `url` (host:port of the protocol's endpoint).

    `levels` (default: every level of the range) measures only those, in that order, with
    the client plan of the whole range (a resumed sweep, or one round of several).

    With `metrics_url` (Triton's /metrics), each window also records GPU utilisation and
    memory where the server has GPUs.

    `hosts`, the load agents of a job (`profiler_app.load_agents`), is needed when
    `params.load_hosts` > 1: this process is host 0 of them.

    Callbacks may be plain functions or coroutines: `on_window(WindowResult)` as each
    window closes, `on_level(LevelResult)` as each level ends, `should_cancel()` polled
    every 100 ms. Raises SweepError when the sweep cannot start (unknown or unloaded
    model, bad shapes, Triton unreachable, too few load agents).
    """
    params.validate()
    levels = list(levels) if levels is not None else params.levels()
    if params.load_hosts > 1 and hosts is None:
        raise SweepError(
            f"load from {params.load_hosts} hosts needs load agents: run the sweep as a job "
            "(the Benchmark page, the API or manage.py perf_sweep)"
        )
    count = params.load_hosts if hosts is not None else 1
    control = aio.AioClient(params.protocol, url)
    try:
        prepared = await prepare(params, url, control)
        local = host_pool(prepared, params, 0, count)
        pool: _Pool | CompositePool = local
        try:
            outputs = await local.started()
            result = SweepResult(params, [], outputs=outputs)
            if hosts is not None and count > 1:
                if not await hosts.join(should_cancel):
                    result.cancelled, result.stopped_reason = True, "cancelled"
                    return result
                await hosts.started()
                threads = [
                    sum(host_plan(params, prepared.sequence, h, count)[1]) for h in range(count)
                ]
                pool = CompositePool(local, hosts, threads)
            await _measure_levels(
                params, levels, pool, control, GpuSampler(metrics_url), result,
                on_window, on_level, should_cancel, plan=prepared.plan,
                triton_local=host_load.is_local(url),
            )  # fmt: skip
            return result
        finally:
            await asyncio.get_running_loop().run_in_executor(None, pool.stop)
    finally:
        await control.close()


async def _measure_levels(
    params: SweepParams,
    levels: Sequence[float],
    pool: _Pool | CompositePool,
    control: aio.AioClient,
    gpu_sampler: GpuSampler,
    result: SweepResult,
    on_window: Callable[[WindowResult], Any] | None,
    on_level: Callable[[LevelResult], Any] | None,
    should_cancel: Callable[[], Any] | None,
    *,
    plan: composing.Plan = composing.NONE,
    triton_local: bool = False,
) -> None:
    batch = params.batch_size
    window_ns = params.measurement_window_ms * 1_000_000
    objectives = goodput.parse(params.goodput)
    for level in levels:
        if pool.sequences:
            await pool.start_sequences(params, level)
        # A composite pool waits for the hosts' common start.
        await _call(pool.set_level, params.mode, level, params.arrival, params.seed)
        window_start = time.monotonic_ns()
        await pool.swap(window_start)  # drop what the previous level left behind
        server_start, steps_start = await composing.read(
            control, plan, params.model, params.version
        )
        machine_start = host_load.sample()
        windows: list[WindowResult] = []
        cancelled = over = False
        while len(windows) < params.max_windows:
            deadline = window_start + window_ns
            while (left := deadline - time.monotonic_ns()) > 0:
                await asyncio.sleep(min(left / 1e9, CANCEL_POLL_S))
                if should_cancel is not None and await _call(should_cancel):
                    cancelled = True
                    break
            # Closing the last window (statistics, the callbacks) may have taken longer than a
            # window on a busy machine, so the loop above never ran: ask once anyway, or a
            # cancel would wait for one more window.
            if not cancelled and should_cancel is not None and await _call(should_cancel):
                cancelled = True
            if cancelled:
                break
            window_end, closed_at = time.monotonic_ns(), time.time()
            # The steps' statistics in the same read as the model's own (`composing.read`).
            replies, (server_end, steps_end), gpu_now = await asyncio.gather(
                pool.swap(window_end),
                composing.read(control, plan, params.model, params.version),
                gpu_sampler.sample(),
            )
            merge_started = time.perf_counter()
            window = _window(level, len(windows), window_start, window_end, replies, batch)
            if isinstance(pool, CompositePool):
                window.hosts = pool.last_hosts
                window.load_cost = {
                    **pool.last_cost,
                    "load_merge_ms": (time.perf_counter() - merge_started) * 1000,
                }
            window.steps = [
                StepServer(step, _server_diff(a, b))
                for step, a, b in zip(plan.steps, steps_start, steps_end, strict=True)
            ]
            window.server = composing.composed(
                plan, _server_diff(server_start, server_end), window.steps
            )
            window.closed_at = closed_at
            window.gpu = gpu_now
            window.good = _count_good(objectives, window)
            server_start, window_start, steps_start = server_end, window_end, steps_end
            windows.append(window)
            await _call(on_window, window)
            tputs = [w.throughput for w in windows]
            lats = [w.chosen_latency_us(params.percentile) for w in windows]
            # perf_analyzer's rule, else the interval of the median once enough windows
            # exist: a busy machine's level keeps measuring, within its max windows.
            if stats.settle(tputs, lats, params.stability_percentage).settled:
                break
            if stats.over_latency_limit(lats, params.latency_threshold_ms):
                over = True
                break
        level_result = _merge_level(level, windows, params, cancelled)
        _merge_steps(level_result, plan)
        level_result.host = host_load.between(
            machine_start,
            host_load.sample(),
            # The workers' CPU, reported with each window; another host's is not this one's.
            workers_cpu_s=None
            if isinstance(pool, CompositePool)
            else sum(w.client_cpu_us * w.requests for w in windows) / 1e6,
            triton_local=triton_local,
        )
        if (
            params.latency_threshold_ms
            and level_result.latency is not None
            and level_result.latency.value(params.percentile) >= params.latency_threshold_ms * 1000
        ):
            over = True
        level_result.over_threshold = over
        if windows:
            result.levels.append(level_result)
            await _call(on_level, level_result)
        if cancelled:
            result.cancelled = True
            result.stopped_reason = "cancelled"
            return
        if over:
            result.stopped_reason = "latency threshold"
            return


def _window(
    level: float, index: int, start_ns: int, end_ns: int, replies: Sequence[tuple], batch: int
) -> WindowResult:
    lats = np.concatenate([r[2] for r in replies]) if replies else np.empty(0, np.int64)
    errors = sum(r[3] for r in replies)
    messages = [m for r in replies for m in r[4]][:5]
    cpu_s = sum(r[5] for r in replies)
    sent = sum(r[6] for r in replies)
    streaming = any(len(r) > 7 and r[7] is not None for r in replies)
    duration = (end_ns - start_ns) / 1e9
    requests = int(lats.size)
    return WindowResult(
        level=level,
        index=index,
        duration_s=duration,
        requests=requests,
        inferences=requests * batch,
        throughput=requests * batch / duration if duration > 0 else 0.0,
        latency=stats.summarize_latencies(lats.tolist()) if requests else None,
        errors=errors,
        error_messages=messages,
        server=None,
        client_cpu_us=cpu_s / requests * 1e6 if requests else 0.0,
        send_rate=sent / duration if duration > 0 else 0.0,
        latencies_ns=lats,
        stream=StreamRecords.pooled([r[7] for r in replies]) if streaming else None,
        sequence=SequenceRecords.from_replies(replies) if _has_sequences(replies) else None,
    )


def _has_sequences(replies: Sequence[tuple]) -> bool:
    return any(len(r) > 8 and r[8] is not None for r in replies)


def _count_good(objectives: Mapping[str, float], window: WindowResult) -> int | None:
    """The window's completed requests that met every goodput objective; None without
    objectives."""
    if not objectives:
        return None
    s = window.stream
    if s is None:
        mask = goodput.good_mask(objectives, window.latencies_ns)
    else:
        mask = goodput.good_mask(
            objectives, s.latency_ns, first_ns=s.first_ns, span_ns=s.span_ns,
            responses=s.responses, tokens=s.tokens,
        )  # fmt: skip
    return int(mask.sum())


def _merge_level(
    level: float, windows: list[WindowResult], params: SweepParams, cancelled: bool
) -> LevelResult:
    """A level from its windows. Settled by perf_analyzer's rule (or with too few windows
    for an interval): its last 3 merged, as perf_analyzer merges them. Otherwise its
    windows after the first (`stats.judged_windows`) are pooled, and its throughput is
    their median, the value the interval is about."""
    settling = stats.settle(
        [w.throughput for w in windows],
        [w.chosen_latency_us(params.percentile) for w in windows],
        params.stability_percentage,
    )
    last3 = windows[-stats.STABILITY_WINDOWS :]
    tputs = [w.throughput for w in last3]
    lats = [w.chosen_latency_us(params.percentile) for w in last3]
    last = windows[-settling.windows :] if windows else []
    duration = sum(w.duration_s for w in last)
    requests = sum(w.requests for w in last)
    # perf_analyzer pools the last windows' latencies; a level cancelled before its first
    # window closed has none.
    pooled = np.concatenate([w.latencies_ns for w in last]) if last else np.empty(0)
    latency = stats.summarize_latencies(pooled.tolist()) if pooled.size else None
    cpu_requests = sum(w.requests for w in last)
    send_rate = sum(w.send_rate * w.duration_s for w in last) / duration if duration > 0 else 0.0
    throughput = requests * params.batch_size / duration if duration > 0 else 0.0
    if settling.reports_median and settling.throughput is not None:
        throughput = settling.throughput.median
    return LevelResult(
        level=level,
        windows=windows,
        stable=settling.settled,
        throughput=throughput,
        latency=latency,
        server=_merge_server([w.server for w in last]),
        throughput_spread=stats.spread(tputs) if tputs else 0.0,
        latency_spread=stats.spread(lats) if lats else 0.0,
        errors=sum(w.errors for w in windows),
        client_cpu_us=(
            sum(w.client_cpu_us * w.requests for w in last) / cpu_requests if cpu_requests else 0.0
        ),
        cancelled=cancelled,
        gpu=gpu.merge([w.gpu for w in last]),
        send_rate=send_rate,
        behind_schedule=params.mode == "request_rate"
        and _behind(level, send_rate, duration, params),
        stream=StreamRecords.pooled([w.stream for w in last]) if params.streaming else None,
        stream_duration_s=duration,
        sequence=_level_sequences(windows, last),
        good=sum(w.good or 0 for w in last) if params.goodput else None,
        hosts=_level_hosts(last),
        settling=settling if windows else None,
    )


def _level_hosts(last: Sequence[WindowResult]) -> list[dict[str, Any]] | None:
    """Each host's share of the level's last windows (those its figures pool), by host."""
    if not any(w.hosts for w in last):
        return None
    totals: dict[str, dict[str, Any]] = {}
    for window in last:
        for share in window.hosts or []:
            total = totals.setdefault(
                share["host"], {"host": share["host"], "requests": 0, "errors": 0}
            )
            total["requests"] += share["requests"]
            total["errors"] += share["errors"]
    return list(totals.values())


def _merge_steps(level: LevelResult, plan: composing.Plan) -> None:
    """A level's steps, each merged over the level's last windows as its own breakdown is;
    an ensemble's breakdown then follows from them (`composing.composed`), so that its
    steps add up to it over the same windows."""
    pooled = level.settling.windows if level.settling else stats.STABILITY_WINDOWS
    last = level.windows[-pooled:]
    if not plan or not last:
        return
    level.steps = [
        StepServer(step, _merge_server([w.steps[i].server for w in last]))
        for i, step in enumerate(plan.steps)
    ]
    # Its counts and request time merged as they are; queue and compute from the steps.
    level.server = composing.composed(plan, level.server, level.steps)


def _level_sequences(
    windows: Sequence[WindowResult], last: Sequence[WindowResult]
) -> SequenceRecords | None:
    """The last windows' positions pooled, as the latencies; the sequences failed in every
    window, as the errors."""
    if not any(w.sequence is not None for w in windows):
        return None
    pooled = SequenceRecords.pooled([w.sequence for w in last])
    pooled.failed = sum(w.sequence.failed for w in windows if w.sequence is not None)
    return pooled


def _behind(rate: float, send_rate: float, duration_s: float, params: SweepParams) -> bool:
    """Whether a request-rate level sent clearly fewer requests than its schedule: under
    BEHIND_SCHEDULE of them, and for Poisson arrivals also 3 standard deviations under."""
    expected, sent = rate * duration_s, send_rate * duration_s
    if duration_s <= 0 or sent >= BEHIND_SCHEDULE * expected:
        return False
    return params.arrival != "poisson" or sent < expected - 3 * math.sqrt(expected)


def run_sweep_sync(params: SweepParams, url: str, **callbacks: Any) -> SweepResult:
    """`run_sweep` for synchronous callers (a Celery task, a script)."""
    return asyncio.run(run_sweep(params, url, **callbacks))
