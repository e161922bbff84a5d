"""Measuring a claimed sweep, the work of the sweep kind of job (`SweepKind`, registered
with `jobs`).

- A resumed sweep measures only the levels without a complete summary row (partial
  windows of the others are dropped first).
- With `rounds` R > 1 the run is R rounds over the levels, one after another (`round_levels`,
  `repeats`): each level row holds the median of its rounds; a resume measures the rounds
  that are missing.
- perf_analyzer exits at the first level that does not settle: the run goes on after it with
  a new invocation (`_run_perf_analyzer`), so every level is kept, marked unstable like the
  built-in engine's; each invocation's exact command is stored, one per line.
- With `load_hosts` N > 1 (built-in engine), each round's run of the engine has N - 1 load
  agents beside this worker (`load_agents`); the time limits allow for waiting on them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any, cast

from registry.servers import Server
from registry.triton_clients import connection
from repository_app import events
from triton_api.client import engine_metrics_url

from . import jobs, load_agents
from .engine import composing
from .engine.loadgen import SweepError, run_sweep
from .level_traces import LevelTracer
from .models import Sweep
from .params import SweepParams
from .sweep_plan import params_of, time_limits
from .sweep_read import knee_summary, publish_summary
from .sweep_recorder import Recorder, drop_incomplete, level_key, round_levels, rounds_done

State = Sweep.State


def measure_sweep(sweep: Sweep, heartbeat: jobs.Heartbeat) -> jobs.Outcome:
    """The work of a claimed sweep (the lifecycle around it is `jobs`'). Rounds run one
    after another, each over every level it still needs (`round_levels`), so a resumed
    sweep measures only what is missing."""
    params = params_of(sweep)
    try:
        server = jobs.server_of(sweep)
    except jobs.JobError as exc:
        return jobs.Outcome(State.FAILED, str(exc))
    drop_incomplete(sweep, rounds_done(sweep), params)
    recorder = Recorder(sweep, params)
    recorder.commands = [line for line in sweep.command.splitlines() if line]
    state, error = State.SUCCEEDED, ""
    if params.trace_sample:
        recorder.tracer = LevelTracer(server, sweep.model, params.trace_sample)
    try:
        for round_no in range(1, max(1, params.rounds) + 1):
            todo = round_levels(sweep, params, round_no)
            if not todo:
                continue
            recorder.round = round_no
            # Later rounds measure the same levels as the first: no threshold stop there.
            run_params = (
                params if round_no == 1 else dataclasses.replace(params, latency_threshold_ms=None)
            )
            work = _RoundWork(server, sweep, run_params, todo, heartbeat, recorder)
            if sweep.engine == Sweep.Engine.PERF_ANALYZER:
                state, error = _run_perf_analyzer(work)
            else:
                state, error = _run_builtin(work)
            if state != State.SUCCEEDED or _should_cancel(heartbeat, recorder):
                break
    except SweepError as exc:
        state, error = State.FAILED, str(exc)
    finally:
        heartbeat.stop()  # before the verdict below: its last reading of the cancel flag
        if recorder.tracer is not None:
            recorder.tracer.stop()  # tracing never outlives the sweep
        recorder.close()
    if state == State.SUCCEEDED and recorder.abort:
        state, error = State.FAILED, recorder.abort
    if state == State.SUCCEEDED and heartbeat.cancel:
        state = State.CANCELLED
    return jobs.Outcome(state, error)


class SweepKind:
    """A perf sweep as a kind of job (`profiler_app.jobs`)."""

    name = cast(str, Sweep.Kind.SWEEP)
    noun = "sweep"

    def time_limits(self, job: Sweep) -> tuple[int, int]:
        return time_limits(params_of(job))

    def run(self, job: Sweep, heartbeat: jobs.Heartbeat) -> jobs.Outcome:
        return measure_sweep(job, heartbeat)

    def summary(self, job: Sweep) -> dict[str, Any]:
        return knee_summary(job)

    def ended(self, job: Sweep, *, by_worker: bool) -> None:
        publish_summary(job)
        if by_worker:
            events.notify(
                job.created_by_id,
                f"Your sweep #{job.pk} of {job.model} {job.state}.",
                f"/sweeps/{job.pk}/",
            )

    def tidy(self) -> None:
        """A dead sweep leaves nothing beyond its row: the watchdog's interrupt is all."""


jobs.register(SweepKind())


def _should_cancel(heartbeat: jobs.Heartbeat, recorder: Recorder) -> bool:
    return heartbeat.stopping or bool(recorder.abort)


@dataclasses.dataclass(frozen=True)
class _RoundWork:
    """What one round's run of an engine needs: the levels it measures with which
    parameters, on which server, and where it reports to."""

    server: Server
    sweep: Sweep
    params: SweepParams
    levels: list[float]
    heartbeat: jobs.Heartbeat
    recorder: Recorder

    def should_cancel(self) -> bool:
        return _should_cancel(self.heartbeat, self.recorder)


def _run_builtin(work: _RoundWork) -> tuple[str, str]:
    server, params, recorder = work.server, work.params, work.recorder

    async def main(hosts: Any) -> Any:
        return await run_sweep(
            params,
            connection(server, params.protocol),
            on_window=lambda w: recorder.call(recorder.window, w),
            on_level=lambda lv: recorder.call(recorder.level, lv),
            should_cancel=work.should_cancel,
            metrics_url=engine_metrics_url(server),
            levels=work.levels,
            hosts=hosts,
        )

    with load_agents.agents_for(work.sweep, params) as hosts:
        result = asyncio.run(main(hosts))
    if recorder.abort:
        return State.FAILED, recorder.abort
    if result.cancelled:
        return State.CANCELLED, ""
    return State.SUCCEEDED, ""


def contiguous_runs(levels: list[float], step: float) -> list[list[float]]:
    """[1, 2, 3, 6, 7] with step 1 -> [[1, 2, 3], [6, 7]]: what one start:end:step covers."""
    runs: list[list[float]] = []
    for level in levels:
        if runs and math.isclose(level - runs[-1][-1], step, rel_tol=1e-6, abs_tol=1e-9):
            runs[-1].append(level)
        else:
            runs.append([level])
    return runs


def _run_perf_analyzer(work: _RoundWork) -> tuple[str, str]:
    """perf_analyzer over `work.levels`. It exits (2) at the first level that does not
    settle within max windows, so the run goes on after that level with a new invocation:
    every level is kept (the unstable one from the windows it printed) and every
    invocation's exact command is stored, one per line."""
    from .engine.perf_analyzer import run_perf_analyzer
    from .engine.perf_analyzer_command import PerfAnalyzerNotFound, locate_perf_analyzer
    from .engine.perf_analyzer_csv import csv_server

    params, recorder = work.params, work.recorder
    triton = connection(work.server, params.protocol)
    try:
        binary = locate_perf_analyzer()
    except PerfAnalyzerNotFound as exc:
        return State.FAILED, str(exc)

    def store_command(command: list[str]) -> None:
        recorder.commands.append(_shell_join(command))
        Sweep.objects.filter(pk=work.sweep.pk).update(command="\n".join(recorder.commands))

    for run in contiguous_runs(work.levels, params.step):
        queue = list(run)
        while queue:
            run_params = dataclasses.replace(params, start=queue[0], end=queue[-1])

            async def main(p: SweepParams = run_params) -> Any:
                return await run_perf_analyzer(
                    p,
                    triton,
                    binary=binary,
                    on_window=lambda w: recorder.call(recorder.pa_window, w),
                    on_level=lambda done: recorder.call(recorder.pa_level, done),
                    should_cancel=work.should_cancel,
                )

            result = asyncio.run(main())
            recorder.run(store_command, result.command)
            # With --percentile, stdout has no average: take it from perf_analyzer's own
            # CSV ("Avg latency", or without it the average gRPC/HTTP time it splits in two).
            for row in result.csv_rows:
                level = row.get("Concurrency", row.get("Request Rate"))
                avg = row.get("Avg latency")
                if avg is None and "response wait" in row:
                    avg = row["response wait"] + row.get("request/response", 0.0)
                own = csv_server(row) if result.plan.kind == composing.BLS else None
                if level is not None and (avg is not None or own):
                    recorder.run(recorder.set_average, level, avg, own)
            if result.cancelled:
                return State.CANCELLED, ""
            if not result.ok:
                message = (
                    "; ".join(result.errors) or f"perf_analyzer exited with {result.returncode}"
                )
                return State.FAILED, message
            last = result.levels[-1] if result.levels else None
            if last is not None and last.over_threshold:
                return State.SUCCEEDED, ""  # over the latency threshold: the sweep ends here
            if last is None and result.returncode != 0:
                return State.FAILED, (
                    f"perf_analyzer exited with {result.returncode} before reporting a level"
                )
            if result.returncode == 0 or last is None or last.stable:
                break
            # It stopped at `last`, which did not settle: go on with the levels after it.
            queue = [q for q in queue if level_key(q) > level_key(last.level)]
    return State.SUCCEEDED, ""


def _shell_join(command: list[str]) -> str:
    import shlex

    return shlex.join(command)
