"""The built-in load generator: perf_analyzer's measurement loop, in Python.

`run_sweep(params, triton)` walks the levels of a concurrency or request-rate range. At each
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

The load itself comes from worker processes (`load_workers`, planned and started by
`worker_pool`), so that neither this event loop (which also runs the callbacks, e.g.
websocket pushes) nor the GIL sits on the hot path. With `params.load_hosts` N > 1 and the load agents of a job (`hosts`), each level is
split among N hosts (`remote.CompositePool`); their windows' raw records are pooled here as
the local workers' are, and each window and level says each host's share (`load_hosts`).

This module is the sweep: what its workers send (`prepare`) and the loop over its levels
and windows. What it returns is `results`; a window cut from the workers' replies and a
level merged from its windows, by perf_analyzer's rules, is `merging`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from triton_api import aio
from triton_api.client import TritonError
from triton_api.connection import Connection, as_connection

from .. import goodput, llm
from ..model_kind import kind_of_served
from ..params import SweepError, SweepParams
from . import composing, host_load, stats
from .callbacks import call
from .composing import StepServer
from .gpu import GpuSampler
from .inputs import InputError, build_payloads, input_specs, max_batch_size
from .merging import build_window, count_good, merge_level, merge_steps, server_diff
from .remote import CompositePool, RemoteHosts
from .results import LevelResult, SweepResult, WindowResult
from .sequences import SequenceSpec
from .worker_pool import WorkerPool, host_plan
from .worker_requests import WorkerSpec

CANCEL_POLL_S = 0.1
STREAM_TIMEOUT_WINDOWS = 2
STREAM_TIMEOUT_MIN_S = 1.0


@dataclass
class Prepared:
    """What every host's workers send, read from Triton once per host: the requests, the
    model's steps (ensembles, BLS) and its sequences."""

    spec: WorkerSpec  # its `client` is each host's own (`host_plan`)
    plan: composing.Plan
    sequence: SequenceSpec | None


async def prepare(params: SweepParams, triton: Connection, control: aio.AioClient) -> Prepared:
    """The workers' spec for the model at `triton`; SweepError when the sweep cannot start
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
        url=triton.url,
        headers=tuple(triton.headers.items()),
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


def host_pool(prepared: Prepared, params: SweepParams, host: int, hosts: int) -> WorkerPool:
    """Host `host`'s worker processes, numbered after the hosts' before it."""
    client, threads = host_plan(params, prepared.sequence, host, hosts)
    base = sum(len(host_plan(params, prepared.sequence, h, hosts)[1]) for h in range(host))
    return WorkerPool(replace(prepared.spec, client=client), threads, worker_base=base)


async def run_sweep(
    params: SweepParams,
    triton: Connection | str,
    *,
    on_window: Callable[[WindowResult], Any] | None = None,
    on_level: Callable[[LevelResult], Any] | None = None,
    should_cancel: Callable[[], Any] | None = None,
    metrics_url: str | None = None,
    levels: Sequence[float] | None = None,
    hosts: RemoteHosts | None = None,
) -> SweepResult:
    """Run the sweep against Triton at `triton` (`triton_clients.connection`, or a bare host:port
    of the protocol's endpoint: no key).

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
    triton = as_connection(triton, params.protocol)
    control = aio.AioClient(triton)
    try:
        prepared = await prepare(params, triton, control)
        local = host_pool(prepared, params, 0, count)
        pool: WorkerPool | CompositePool = local
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
                triton_local=host_load.is_local(triton.url),
            )  # fmt: skip
            return result
        finally:
            await asyncio.get_running_loop().run_in_executor(None, pool.stop)
    finally:
        await control.close()


async def _measure_levels(
    params: SweepParams,
    levels: Sequence[float],
    pool: WorkerPool | CompositePool,
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
        await call(pool.set_level, params.mode, level, params.arrival, params.seed)
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
                if should_cancel is not None and await call(should_cancel):
                    cancelled = True
                    break
            # Closing the last window (statistics, the callbacks) may have taken longer than a
            # window on a busy machine, so the loop above never ran: ask once anyway, or a
            # cancel would wait for one more window.
            if not cancelled and should_cancel is not None and await call(should_cancel):
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
            window = build_window(level, len(windows), window_start, window_end, replies, batch)
            if isinstance(pool, CompositePool):
                window.hosts = pool.last_hosts
                window.load_cost = {
                    **pool.last_cost,
                    "load_merge_ms": (time.perf_counter() - merge_started) * 1000,
                }
            window.steps = [
                StepServer(step, server_diff(a, b))
                for step, a, b in zip(plan.steps, steps_start, steps_end, strict=True)
            ]
            window.server = composing.composed(
                plan, server_diff(server_start, server_end), window.steps
            )
            window.closed_at = closed_at
            window.gpu = gpu_now
            window.good = count_good(objectives, window)
            server_start, window_start, steps_start = server_end, window_end, steps_end
            windows.append(window)
            await call(on_window, window)
            tputs = [w.throughput for w in windows]
            lats = [w.chosen_latency_us(params.percentile) for w in windows]
            # perf_analyzer's rule, else the interval of the median once enough windows
            # exist: a busy machine's level keeps measuring, within its max windows.
            if stats.settle(tputs, lats, params.stability_percentage).settled:
                break
            if stats.over_latency_limit(lats, params.latency_threshold_ms):
                over = True
                break
        level_result = merge_level(level, windows, params, cancelled)
        merge_steps(level_result, plan)
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
            await call(on_level, level_result)
        if cancelled:
            result.cancelled = True
            result.stopped_reason = "cancelled"
            return
        if over:
            result.stopped_reason = "latency threshold"
            return


def run_sweep_sync(params: SweepParams, triton: Connection | str, **callbacks: Any) -> SweepResult:
    """`run_sweep` for synchronous callers (a Celery task, a script)."""
    return asyncio.run(run_sweep(params, triton, **callbacks))
