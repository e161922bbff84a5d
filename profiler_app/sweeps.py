"""Perf sweeps, one kind of job (`jobs` owns the queue, claim, heartbeat, cancel, resume,
finish): create, measure, re-run, and read them back.

- Points are upserted on (sweep, level, window), so a retried or resumed task never
  duplicates them; a level's summary is the row with window = -1. Every write is published
  to the group `sweep.<id>` right after it (events carry the group's `seq`).
- A resumed sweep measures only the levels without a complete summary row (partial
  windows of the others are dropped first). `rerun` copies the parameters into a new sweep.
- With `rounds` R > 1 the run is R rounds over the levels, one after another (`round_levels`,
  `repeats`): each level row holds the median of its rounds; a resume measures the rounds
  that are missing.
- perf_analyzer exits at the first level that does not settle: the run goes on after it with
  a new invocation (`_run_perf_analyzer`), so every level is kept, marked unstable like the
  built-in engine's; each invocation's exact command is stored, one per line.
- The verdict (knee, recommendation, caveat) is `verdict.summarize`: from settled levels only.
- With `load_hosts` N > 1 (built-in engine), each round's run of the engine has N - 1 load
  agents beside this worker (`load_agents`); the time limits allow for waiting on them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from django.db import connections, transaction
from django.utils import timezone

from repository_app import events
from repository_app.naming import InvalidModelName, check_model_name
from repository_app.servers import Server
from repository_app.triton.client import (
    TritonError,
    engine_metrics_url,
    engine_url,
    get_client,
)

from . import jobs, kind_rules, llm, load_agents, measure, repeats, verdict
from .engine import composing
from .engine.inputs import InputError, build_payloads, input_specs, max_batch_size
from .engine.loadgen import (
    LevelResult,
    SweepError,
    WindowResult,
    run_sweep,
)
from .model_kind import ModelKind, kind_of_served
from .models import Sweep, SweepPoint
from .params import FlagsRefused, SweepParams
from .sweep_plan import params_of, time_limits

log = logging.getLogger(__name__)

State = Sweep.State

PRESETS: dict[str, dict[str, Any]] = {
    "default": {"range": "1:8:1", "measurement_interval": 2000, "max_trials": 10},
    "quick": {"range": "1:4:1", "measurement_interval": 1000, "max_trials": 5},
    "thorough": {"range": "1:16:1", "measurement_interval": 5000, "max_trials": 20},
}


# --- parameters -------------------------------------------------------------------------------


def params_to_json(params: SweepParams) -> dict[str, Any]:
    return dataclasses.asdict(params)


def level_key(level: float) -> float:
    """Levels as stored: rounded, so a resumed range lands on the same keys."""
    return round(float(level), 6)


# TextChoices members are str; untyped Django shows mypy a (value, label) tuple.
_BUILTIN = cast(str, Sweep.Engine.BUILTIN)


def preflight(server: Server, params: SweepParams, engine: str = _BUILTIN) -> ModelKind:
    """Check what can be checked before queueing on ``server``; raises SweepError with a
    user message. The bounds (range, levels, window) come first: nothing is built before
    they pass. Returns the model's kind, from the config Triton serves (a sweep stores its
    label)."""
    try:
        check_model_name(params.model)  # the model name rule (repository_app.naming)
    except InvalidModelName as exc:
        raise SweepError(str(exc)) from None
    params.validate()
    if engine == Sweep.Engine.PERF_ANALYZER:
        from .engine.perf_analyzer import PerfAnalyzerNotFound, locate_perf_analyzer

        try:
            locate_perf_analyzer()
        except PerfAnalyzerNotFound as exc:
            raise SweepError(str(exc)) from None
    client = get_client(server)
    try:
        states = client.model_states(params.model)
    except TritonError as exc:
        raise SweepError(f"cannot reach Triton: {exc.message}") from None
    wanted = [s for s in states if not params.version or s.version == params.version]
    if not any(s.state == "READY" for s in wanted):
        seen = ", ".join(f"v{s.version} {s.state}" for s in wanted) or "not loaded"
        which = f" version {params.version}" if params.version else ""
        raise SweepError(
            f"model {params.model!r}{which} is not READY on Triton ({seen}): load it first"
        )
    try:
        metadata = client.model_metadata(params.model, params.version)
        config = client.model_config(params.model, params.version)
    except TritonError as exc:
        raise SweepError(f"model {params.model!r}: {exc.message}") from None
    kind = kind_of_served(config)
    refused = {
        **llm.refusals(params, metadata, engine),  # token output, goodput: model and engine
        **kind_rules.refusals(params, kind, engine),
    }
    if refused:  # flags that do not fit the model's kind, each on its own
        raise FlagsRefused(refused)
    try:  # a BLS model's calls reach perf_analyzer's command line
        composing.check_names(params.model, [composing.Composing(c) for c in kind.calls])
    except composing.StepError as exc:
        raise SweepError(str(exc)) from None
    mbs = max_batch_size(config)
    if mbs and params.batch_size > mbs:
        raise SweepError(f"batch size {params.batch_size} exceeds the model's max_batch_size {mbs}")
    try:
        build_payloads(
            input_specs(metadata, config),
            batch_size=params.batch_size,
            batching=mbs > 0,
            shapes=params.shapes,
            data=params.input_data,
            seed=params.seed,
        )
    except InputError as exc:
        raise SweepError(f"inputs: {exc}") from None
    return kind


# --- creating and queueing --------------------------------------------------------------------


def create_sweep(
    server: Server,
    params: SweepParams,
    *,
    engine: str = _BUILTIN,
    user: Any = None,
    enqueue: bool = True,
    rerun_of: Sweep | None = None,
    name: str = "",
    note: str = "",
    model_kind: str = "",
) -> Sweep:
    """A QUEUED sweep row on ``server``; its task is sent once the row is committed (when
    `enqueue`). `model_kind` is the model's kind as `preflight` read it (`ModelKind.label`).
    Raises jobs.QueueUnavailable, with nothing stored, when the queue cannot take it."""
    if enqueue:
        jobs.check_queue()
    with transaction.atomic():
        sweep = jobs.create(
            cast(str, Sweep.Kind.SWEEP),
            params_to_json(params),
            server=server,
            user=user,
            levels_total=params.level_count(),
            enqueue=enqueue,
            engine=engine,
            rerun_of=rerun_of,
            name=name,
            note=note,
            model_kind=model_kind[:200],
        )
    from team import audit

    audit.record(
        user if getattr(user, "is_authenticated", False) else (user or "system"),
        "sweep.start",
        model_name=sweep.model,
        server=server.name,
        target=f"sweep #{sweep.pk}",
        detail=f"{engine} {params.mode} {params.range_text}"
        + (f" × {params.rounds} rounds" if params.rounds > 1 else ""),
        after_sha256=sweep.config_sha256,
    )
    jobs.publish_state(sweep)
    return sweep


# --- user actions -----------------------------------------------------------------------------


def rerun(sweep_id: int, user: Any = None) -> Sweep:
    """A new sweep with the same parameters, engine and server (checked again: the bounds
    may be newer than the sweep, the server may be gone)."""
    original = Sweep.objects.get(pk=sweep_id)
    params = params_of(original)
    params.validate()
    return create_sweep(
        jobs.server_of(original),
        params,
        engine=original.engine,
        user=user,
        rerun_of=original,
        name=original.name,
        model_kind=original.model_kind,
    )


def set_label(sweep_id: int, name: str, note: str) -> None:
    """A sweep's name and note (any state: they describe it, they change no measurement)."""
    Sweep.objects.filter(pk=sweep_id).update(name=name[:120], note=note)


# --- running a claimed sweep ------------------------------------------------------------------


# The one shape of a measurement (profiler_app.measure); these names stay for callers.
latency_fields = measure.latency_fields


def point_json(p: SweepPoint) -> dict[str, Any]:
    """A stored row (a window, or a level's summary at window -1) as exports, events and
    the API show it."""
    return measure.point_json(p)


class _Recorder:
    """Upserts points and publishes them, in order, on one thread of its own.

    With `params.rounds` > 1 a level's windows of round r are stored at window numbers
    (r - 1) x max_windows + i, and its summary row is the median of its rounds so far
    (`repeats.merge_rounds`), each round kept in `extra["rounds"]`.
    """

    def __init__(self, sweep: Sweep, params: SweepParams) -> None:
        self.sweep = sweep
        self.params = params
        self.group = sweep.group
        self.abort = ""  # set when requests fail: the sweep stops and fails
        self.round = 1
        self.done = rounds_done(sweep)  # level -> rounds measured
        self.commands: list[str] = []  # perf_analyzer's invocations, in order
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep-recorder")

    def close(self) -> None:
        self.executor.submit(connections.close_all).result()
        self.executor.shutdown()

    async def call(self, fn: Any, *args: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def run(self, fn: Any, *args: Any) -> Any:
        """`fn` on the recorder's thread, from synchronous code (between engine runs)."""
        return self.executor.submit(fn, *args).result()

    @property
    def chosen_key(self) -> str:
        return measure.latency_key(self.params.percentile)

    def _window_number(self, index: int) -> int:
        return (self.round - 1) * self.params.max_windows + index

    def _upsert(self, level: float, window: int, fields: dict[str, Any]) -> SweepPoint:
        point, _ = SweepPoint.objects.update_or_create(
            sweep_id=self.sweep.pk, level=level_key(level), window=window, defaults=fields
        )
        return point

    def _check_errors(self, level: float, errors: int, messages: list[str]) -> None:
        if errors and not self.abort:
            label = "concurrency" if self.params.mode == "concurrency" else "request rate"
            first = messages[0] if messages else "no message"
            self.abort = f"{errors} request(s) failed at {label} {level:g}: {first}"

    def _store_level(self, level: float, fields: dict[str, Any], cancelled: bool) -> None:
        """This round's summary of a level: the row itself with one round, else merged
        into the row's rounds (a round cut short leaves the earlier rounds' median)."""
        key = level_key(level)
        point: SweepPoint | None
        if self.params.rounds <= 1:
            point = self._upsert(level, SweepPoint.LEVEL, fields)
        else:
            existing = SweepPoint.objects.filter(
                sweep_id=self.sweep.pk, level=key, window=SweepPoint.LEVEL
            ).first()
            earlier = (
                list(existing.extra.get("rounds") or [])
                if existing is not None and verdict.measured(existing)
                else []
            )
            if cancelled and earlier:
                point = existing
            elif cancelled:
                point = self._upsert(level, SweepPoint.LEVEL, fields)
            else:
                kept = [r for r in earlier if r.get("round") != self.round]
                rounds = sorted(
                    [*kept, repeats.round_record(self.round, fields)], key=lambda r: r["round"]
                )
                merged = repeats.merge_rounds(rounds, self.chosen_key, fields.get("extra"))
                point = self._upsert(level, SweepPoint.LEVEL, merged)
        if not cancelled:
            self.done[key] = max(self.done.get(key, 0), self.round)
        if point is not None:
            self._publish_level(point)

    def _publish_level(self, point: SweepPoint) -> None:
        events.publish(
            self.group,
            "sweep.level",
            {
                "sweep": self.sweep.pk,
                "point": point_json(point),
                "levels_done": sum(1 for n in self.done.values() if n >= 1),
                "levels_total": self.sweep.levels_total,
                "round": self.round,
            },
        )

    def window(self, w: WindowResult) -> None:
        self._store_window(w.measured())
        self._check_errors(w.level, w.errors, w.error_messages)

    def _store_window(self, m: measure.Window) -> None:
        """Both engines' windows: stored at this round's number, then sent with closed_at
        (it lets viewers, and benchmarks/bench_live.py, see the delivery delay)."""
        m.extra["round"] = self.round
        point = self._upsert(m.level, self._window_number(m.window), m.columns())
        events.publish(
            self.group,
            "sweep.window",
            {
                "sweep": self.sweep.pk,
                "point": {**point_json(point), "closed_at": m.closed_at},
                "closed_at": m.closed_at,
            },
        )

    def level(self, lv: LevelResult) -> None:
        m = lv.measured()
        cancelled = lv.cancelled or bool(self.abort)
        m.extra["cancelled"] = cancelled
        self._store_level(lv.level, m.columns(), cancelled)

    # perf_analyzer's streamed output
    def pa_window(self, w: Any) -> None:
        self._store_window(w.measured(self.chosen_key))

    def pa_level(self, lv: Any) -> None:
        m = lv.measured(self.chosen_key)
        self._store_level(lv.level, m.columns(), bool(m.extra["cancelled"]))

    def set_average(
        self, level: float, avg_us: float | None, own: dict[str, float] | None = None
    ) -> None:
        """perf_analyzer's average latency of this round, read from its CSV afterwards, and
        `own`: a BLS model's own breakdown, which only the CSV has. Fields it printed are
        kept."""
        values = {k: v for k, v in {"avg_us": avg_us, **(own or {})}.items() if v is not None}
        row = SweepPoint.objects.filter(
            sweep_id=self.sweep.pk, level=level_key(level), window=SweepPoint.LEVEL
        ).first()
        if row is None or not values:
            return
        rounds = row.extra.get("rounds")
        if not rounds:
            missing = {k: v for k, v in values.items() if getattr(row, k) is None}
            if missing:
                SweepPoint.objects.filter(pk=row.pk).update(**missing)
            return
        for record in rounds:
            if record.get("round") == self.round:
                record.update({k: v for k, v in values.items() if record.get(k) is None})
        merged = repeats.merge_rounds(rounds, self.chosen_key, row.extra)
        self._upsert(level, SweepPoint.LEVEL, merged)


def rounds_done(sweep: Sweep) -> dict[float, int]:
    """Per level, how many rounds its summary row holds (a measured row without rounds is
    one); levels cut short (cancelled, aborted) are absent."""
    done: dict[float, int] = {}
    for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL):
        if verdict.measured(p):
            done[level_key(p.level)] = len(p.extra.get("rounds") or []) or 1
    return done


def completed_levels(sweep: Sweep) -> list[float]:
    """Levels with a summary row that was not cut short (cancelled or aborted)."""
    return sorted(rounds_done(sweep))


def _drop_incomplete(sweep: Sweep, done: dict[float, int], params: SweepParams) -> None:
    """Before a (resumed) run: drop levels without a complete round, and the windows of a
    round that was cut short."""
    SweepPoint.objects.filter(sweep=sweep).exclude(level__in=list(done)).delete()
    for level, rounds in done.items():
        SweepPoint.objects.filter(
            sweep=sweep, level=level, window__gte=rounds * params.max_windows
        ).delete()


def round_levels(sweep: Sweep, params: SweepParams, round_no: int) -> list[float]:
    """The levels round `round_no` still has to measure. Round 1: those never measured, up
    to a level that went over the latency threshold (the sweep stopped there); later
    rounds: the levels round 1 measured, each once more."""
    rows = [
        p
        for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL)
        if verdict.measured(p)
    ]
    done = {level_key(p.level): len(p.extra.get("rounds") or []) or 1 for p in rows}
    levels = params.levels()
    over = [p.level for p in rows if p.extra.get("over_threshold")]
    if over:
        levels = [lv for lv in levels if level_key(lv) <= min(over)]
    if round_no == 1:
        return [lv for lv in levels if done.get(level_key(lv), 0) < 1]
    return [lv for lv in levels if 1 <= done.get(level_key(lv), 0) < round_no]


def measure_sweep(sweep: Sweep, heartbeat: jobs.Heartbeat) -> jobs.Outcome:
    """The work of a claimed sweep (the lifecycle around it is `jobs`'). Rounds run one
    after another, each over every level it still needs (`round_levels`), so a resumed
    sweep measures only what is missing."""
    params = params_of(sweep)
    try:
        server = jobs.server_of(sweep)
    except jobs.JobError as exc:
        return jobs.Outcome(State.FAILED, str(exc))
    _drop_incomplete(sweep, rounds_done(sweep), params)
    recorder = _Recorder(sweep, params)
    recorder.commands = [line for line in sweep.command.splitlines() if line]
    state, error = State.SUCCEEDED, ""
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
            if sweep.engine == Sweep.Engine.PERF_ANALYZER:
                state, error = _run_perf_analyzer(
                    server, sweep, run_params, todo, heartbeat, recorder
                )
            else:
                state, error = _run_builtin(server, sweep, run_params, todo, heartbeat, recorder)
            if state != State.SUCCEEDED or _should_cancel(heartbeat, recorder):
                break
    except SweepError as exc:
        state, error = State.FAILED, str(exc)
    finally:
        heartbeat.stop()  # before the verdict below: its last reading of the cancel flag
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


def _should_cancel(heartbeat: jobs.Heartbeat, recorder: _Recorder) -> bool:
    return heartbeat.stopping or bool(recorder.abort)


def _run_builtin(
    server: Server,
    sweep: Sweep,
    params: SweepParams,
    levels: list[float],
    heartbeat: jobs.Heartbeat,
    recorder: _Recorder,
) -> tuple[str, str]:
    async def main(hosts: Any) -> Any:
        return await run_sweep(
            params,
            engine_url(server, params.protocol),
            on_window=lambda w: recorder.call(recorder.window, w),
            on_level=lambda lv: recorder.call(recorder.level, lv),
            should_cancel=lambda: _should_cancel(heartbeat, recorder),
            metrics_url=engine_metrics_url(server),
            levels=levels,
            hosts=hosts,
        )

    with load_agents.agents_for(sweep, params) as hosts:
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


def _run_perf_analyzer(
    server: Server,
    sweep: Sweep,
    params: SweepParams,
    levels: list[float],
    heartbeat: jobs.Heartbeat,
    recorder: _Recorder,
) -> tuple[str, str]:
    """perf_analyzer over `levels`. It exits (2) at the first level that does not settle
    within max windows, so the run goes on after that level with a new invocation: every
    level is kept (the unstable one from the windows it printed) and every invocation's
    exact command is stored, one per line."""
    from .engine.perf_analyzer import (
        PerfAnalyzerNotFound,
        csv_server,
        locate_perf_analyzer,
        run_perf_analyzer,
    )

    url = engine_url(server, params.protocol)
    try:
        binary = locate_perf_analyzer()
    except PerfAnalyzerNotFound as exc:
        return State.FAILED, str(exc)

    def store_command(command: list[str]) -> None:
        recorder.commands.append(_shell_join(command))
        Sweep.objects.filter(pk=sweep.pk).update(command="\n".join(recorder.commands))

    for run in contiguous_runs(levels, params.step):
        queue = list(run)
        while queue:
            run_params = dataclasses.replace(params, start=queue[0], end=queue[-1])

            async def main(p: SweepParams = run_params) -> Any:
                return await run_perf_analyzer(
                    p,
                    url,
                    binary=binary,
                    on_window=lambda w: recorder.call(recorder.pa_window, w),
                    on_level=lambda done: recorder.call(recorder.pa_level, done),
                    should_cancel=lambda: _should_cancel(heartbeat, recorder),
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


# --- reading ----------------------------------------------------------------------------------


def latency_value(point: SweepPoint | dict[str, Any], percentile: int | str) -> float | None:
    key = "avg_us" if percentile == "avg" else f"p{int(percentile)}_us"
    return point[key] if isinstance(point, dict) else getattr(point, key)


def knee_summary(sweep: Sweep, level_points: Iterable[SweepPoint] | None = None) -> dict[str, Any]:
    """The verdict (`verdict.summarize`): knee, best level within the budget, the
    recommendation and the caveat, from the levels that settled, for the sweep's state."""
    if level_points is None:
        level_points = SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL)
    return verdict.summarize(level_points, params_of(sweep), sweep.state)


def sweep_json(sweep: Sweep) -> dict[str, Any]:
    return {
        "id": sweep.pk,
        "kind": sweep.kind,
        "model": sweep.model,
        "version": sweep.version,
        "server": sweep.server,
        "server_facts": sweep.server_facts,
        "engine": sweep.engine,
        **jobs.lifecycle_json(sweep),
        "params": sweep.params,
        "command": sweep.command,
        "config_sha256": sweep.config_sha256,
        "created_at": sweep.created_at.isoformat() if sweep.created_at else None,
        "levels_total": sweep.levels_total,
        "summary": sweep.summary if sweep.finished else knee_summary(sweep),
        "name": sweep.name,
        "note": sweep.note,
        "model_kind": sweep.model_kind,
        "rounds": max(1, int(sweep.params.get("rounds") or 1)),
        # For the page's ETA: the server's clock, and the windows an earlier attempt left
        # (a resumed sweep's pace is measured on its own windows only).
        "server_now": timezone.now().isoformat(),
        "windows_before_start": (
            SweepPoint.objects.filter(
                sweep=sweep, window__gte=0, recorded_at__lt=sweep.started_at
            ).count()
            if sweep.state == State.RUNNING and sweep.started_at
            else 0
        ),
    }


def snapshot(sweep_id: int) -> dict[str, Any] | None:
    """Everything a page needs: the sweep, all its points, and the group's seq (read
    *before* the points, so any event with a higher seq may repeat a point but none is
    missed)."""
    sweep = Sweep.objects.select_related("created_by").filter(pk=sweep_id).first()
    if sweep is None:
        return None
    seq = events.current_seq(sweep.group)
    points = [point_json(p) for p in SweepPoint.objects.filter(sweep=sweep)]
    return {"group": sweep.group, "seq": seq, "sweep": sweep_json(sweep), "points": points}


def publish_summary(sweep: Sweep) -> None:
    events.publish(
        sweep.group,
        "sweep.summary",
        {"sweep": sweep.pk, "state": sweep.state, "error": sweep.error, "summary": sweep.summary},
    )
