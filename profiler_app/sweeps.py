"""Perf sweeps: create, queue, claim, run, cancel, resume, re-run, and read them back.

The lifecycle, and why it is built this way:

- A sweep is a row (`Sweep`). Creating one commits it as QUEUED and, in
  `transaction.on_commit`, sends the Celery task `profiler_app.run_sweep` with a soft time
  limit computed from its parameters (levels x max windows x window length + margins).
- One sweep runs per Triton server at a time. `claim` is a conditional UPDATE on that
  server's `SweepSlot` row (free -> this sweep) and on the sweep (QUEUED -> RUNNING), in one
  transaction, and only for the head of the server's queue (FIFO by queued time).
- A task that cannot claim returns at once: it never holds the worker slot while it waits.
  The sweep that finishes (or the watchdog that declares one interrupted) releases the slot
  and dispatches the next queued sweep of that server (`dispatch_next`); the watchdog also
  re-dispatches a queued sweep whose task went missing.
- Running sweeps beat a heartbeat every 2 s from a monitor thread, which also reads the
  cancel flag every 0.2 s; the engine polls `should_cancel` every 100 ms, so a cancel stops
  the sweep within one window and keeps what was measured (no `revoke(terminate=True)`).
- Points are upserted on (sweep, level, window), so a retried or resumed task never
  duplicates them; a level's summary is the row with window = -1. Every write is published
  to the group `sweep.<id>` right after it (events carry the group's `seq`).
- `resume` re-queues a failed/cancelled/interrupted sweep; the run then measures only the
  levels without a complete summary row (partial windows of the others are dropped first).
  `rerun` copies the parameters into a new sweep.
- With `rounds` R > 1 the run is R rounds over the levels, one after another (`round_levels`,
  `repeats`): each level row holds the median of its rounds; a resume measures the rounds
  that are missing.
- perf_analyzer exits at the first level that does not settle: the run goes on after it with
  a new invocation (`_run_perf_analyzer`), so every level is kept, marked unstable like the
  built-in engine's; each invocation's exact command is stored, one per line.
- The verdict (knee, recommendation, caveat) is `verdict.summarize`: from settled levels only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import math
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone

from dashboard.redact import redact
from repository_app import events
from repository_app.naming import InvalidModelName, check_model_name
from repository_app.triton.client import (
    TritonError,
    engine_metrics_url,
    engine_url,
    get_client,
)

from . import repeats, verdict
from .engine import stats
from .engine.inputs import InputError, build_payloads, input_specs, max_batch_size
from .engine.loadgen import (
    LevelResult,
    SweepError,
    WindowResult,
    run_sweep,
)
from .models import Sweep, SweepPoint, SweepSlot
from .params import SweepParams

log = logging.getLogger(__name__)

State = Sweep.State
HEARTBEAT_EVERY_S = 2.0
CANCEL_POLL_S = 0.2
REDISPATCH_AFTER_S = 60.0
LEGACY_RATE_THREADS = 16

PRESETS: dict[str, dict[str, Any]] = {
    "default": {"range": "1:8:1", "measurement_interval": 2000, "max_trials": 10},
    "quick": {"range": "1:4:1", "measurement_interval": 1000, "max_trials": 5},
    "thorough": {"range": "1:16:1", "measurement_interval": 5000, "max_trials": 20},
}


# --- parameters -------------------------------------------------------------------------------


def params_to_json(params: SweepParams) -> dict[str, Any]:
    return dataclasses.asdict(params)


def params_of(sweep: Sweep) -> SweepParams:
    names = {f.name for f in dataclasses.fields(SweepParams)}
    stored = {k: v for k, v in sweep.params.items() if k in names}
    if stored.get("mode") == "request_rate":  # stored before max_threads: they ran with 16
        stored.setdefault("max_threads", LEGACY_RATE_THREADS)
    return SweepParams(**stored)


def level_key(level: float) -> float:
    """Levels as stored: rounded, so a resumed range lands on the same keys."""
    return round(float(level), 6)


def config_snapshot(model: str) -> tuple[str, str]:
    """(sha256, text) of the model's config.pbtxt on disk; empty when there is none."""
    path = settings.MODEL_REPOSITORY / model / "config.pbtxt"
    try:
        raw = path.read_bytes()
    except OSError:
        return "", ""
    return hashlib.sha256(raw).hexdigest(), raw.decode("utf-8", errors="replace")


def time_limits(params: SweepParams) -> tuple[int, int]:
    """(soft, hard) seconds for one task: every level at max windows in every round, plus
    margins."""
    levels = params.level_count() * max(1, params.rounds)
    window_s = params.measurement_window_ms / 1000
    soft = int(levels * (params.max_windows * window_s * 1.25 + 5) + 120)
    return soft, soft + 60


# TextChoices members are str; untyped Django shows mypy a (value, label) tuple.
_BUILTIN = cast(str, Sweep.Engine.BUILTIN)


def preflight(params: SweepParams, engine: str = _BUILTIN) -> None:
    """Check what can be checked before queueing; raises SweepError with a user message.
    The bounds (range, levels, window) come first: nothing is built before they pass."""
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
    client = get_client()
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


# --- creating and queueing --------------------------------------------------------------------


class QueueUnavailable(SweepError):
    """The broker (Redis) does not answer: nothing was queued."""


def check_queue() -> None:
    """Raise QueueUnavailable unless the Celery broker answers a ping."""
    import redis

    try:
        redis.Redis.from_url(
            settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1
        ).ping()
    except (redis.RedisError, OSError) as exc:
        raise QueueUnavailable(
            f"the task queue (Redis at {redact(settings.CELERY_BROKER_URL)}) is unreachable, so the "
            "sweep was not queued: try again when Redis is back"
        ) from exc


def create_sweep(
    params: SweepParams,
    *,
    engine: str = _BUILTIN,
    user: Any = None,
    enqueue: bool = True,
    rerun_of: Sweep | None = None,
    name: str = "",
    note: str = "",
) -> Sweep:
    """A QUEUED sweep row; its task is sent once the row is committed (when `enqueue`).
    Raises QueueUnavailable, with nothing stored, when the queue cannot take it."""
    if enqueue:
        check_queue()
    sha, text = config_snapshot(params.model)
    now = timezone.now()
    with transaction.atomic():
        sweep = Sweep.objects.create(
            model=params.model,
            version=params.version,
            server=settings.TRITON_URL,
            config_sha256=sha,
            config_text=text,
            params=params_to_json(params),
            engine=engine,
            created_by=user if getattr(user, "is_authenticated", False) else None,
            state=State.QUEUED,
            queued_at=now,
            levels_total=params.level_count(),
            rerun_of=rerun_of,
            name=name,
            note=note,
        )
        if enqueue:
            transaction.on_commit(lambda: dispatch(sweep.pk))
    from team import audit

    audit.record(
        user if getattr(user, "is_authenticated", False) else (user or "system"),
        "sweep.start",
        model_name=sweep.model,
        target=f"sweep #{sweep.pk}",
        detail=f"{engine} {params.mode} {params.range_text}"
        + (f" × {params.rounds} rounds" if params.rounds > 1 else ""),
        after_sha256=sha,
    )
    publish_state(sweep)
    return sweep


def dispatch(sweep_id: int) -> bool:
    """Send the Celery task of a QUEUED sweep. False when it is not queued (or the broker
    is down: it stays queued and the watchdog dispatches it again later)."""
    sweep = Sweep.objects.filter(pk=sweep_id, state=State.QUEUED).first()
    if sweep is None:
        return False
    soft, hard = time_limits(params_of(sweep))
    Sweep.objects.filter(pk=sweep_id).update(dispatched_at=timezone.now())
    from .tasks import run_sweep_task

    try:
        run_sweep_task.apply_async(args=[sweep_id], soft_time_limit=soft, time_limit=hard)
    except Exception as exc:  # noqa: BLE001 - any broker failure: retried by the watchdog
        log.warning("sweep #%s not dispatched: %s", sweep_id, exc)
        return False
    return True


def _queued(server: str) -> Any:
    return Sweep.objects.filter(server=server, state=State.QUEUED).order_by("queued_at", "id")


def _ahead_of(sweep: Sweep) -> Any:
    return _queued(sweep.server).filter(
        Q(queued_at__lt=sweep.queued_at) | Q(queued_at=sweep.queued_at, id__lt=sweep.pk)
    )


def queue_position(sweep: Sweep) -> int | None:
    """1 = next to run on its server; None when not queued."""
    if sweep.state != State.QUEUED:
        return None
    return _ahead_of(sweep).count() + 1


def running_on(server: str) -> Sweep | None:
    slot = SweepSlot.objects.filter(server=server).select_related("sweep").first()
    return slot.sweep if slot and slot.sweep else None


def dispatch_next(server: str) -> int | None:
    """Dispatch the head of the server's queue when its slot is free; returns its id."""
    if SweepSlot.objects.filter(server=server, sweep__isnull=False).exists():
        return None
    head = _queued(server).first()
    if head is None:
        return None
    transaction.on_commit(lambda: dispatch(head.pk))
    return head.pk


# --- claiming the server ----------------------------------------------------------------------


class _NotClaimed(Exception):
    pass


def claim(sweep_id: int) -> bool:
    """QUEUED -> RUNNING, holding the server's slot; False when the slot is taken, the sweep
    is not queued, or an older queued sweep of the same server comes first."""
    sweep = Sweep.objects.filter(pk=sweep_id, state=State.QUEUED).first()
    if sweep is None:
        return False
    SweepSlot.objects.get_or_create(server=sweep.server)
    now = timezone.now()
    try:
        with transaction.atomic():
            if _ahead_of(sweep).exists():
                raise _NotClaimed
            took = SweepSlot.objects.filter(server=sweep.server, sweep__isnull=True).update(
                sweep=sweep_id, claimed_at=now
            )
            if not took:
                raise _NotClaimed
            started = Sweep.objects.filter(pk=sweep_id, state=State.QUEUED).update(
                state=State.RUNNING,
                started_at=now,
                heartbeat_at=now,
                finished_at=None,
                error="",
                cancel_requested=False,
            )
            if not started:
                raise _NotClaimed  # rolls the slot back too
    except _NotClaimed:
        return False
    Sweep.objects.filter(pk=sweep_id).update(attempts=sweep.attempts + 1)
    return True


def release(sweep_id: int) -> bool:
    """Free the slot this sweep holds (no-op when it holds none)."""
    return bool(SweepSlot.objects.filter(sweep_id=sweep_id).update(sweep=None, claimed_at=None))


# --- user actions -----------------------------------------------------------------------------


def cancel(sweep_id: int) -> str:
    """A queued sweep is cancelled at once; a running one is asked to stop (within a window)."""
    now = timezone.now()
    if Sweep.objects.filter(pk=sweep_id, state=State.QUEUED).update(
        state=State.CANCELLED, finished_at=now, cancel_requested=True
    ):
        sweep = Sweep.objects.get(pk=sweep_id)
        publish_state(sweep)
        publish_summary(sweep)
        return "Cancelled before it started."
    if Sweep.objects.filter(pk=sweep_id, state=State.RUNNING).update(cancel_requested=True):
        publish_state(Sweep.objects.get(pk=sweep_id))
        return "Cancelling: the sweep stops within one measurement window."
    raise SweepError("only a queued or running sweep can be cancelled")


def resume(sweep_id: int) -> Sweep:
    """Queue a failed/cancelled/interrupted sweep again; it measures only missing levels."""
    with transaction.atomic():
        updated = Sweep.objects.filter(pk=sweep_id, state__in=Sweep.RESUMABLE).update(
            state=State.QUEUED,
            queued_at=timezone.now(),
            cancel_requested=False,
            error="",
            finished_at=None,
        )
        if not updated:
            raise SweepError("only a failed, cancelled or interrupted sweep can be resumed")
        transaction.on_commit(lambda: dispatch(sweep_id))
    sweep = Sweep.objects.get(pk=sweep_id)
    publish_state(sweep)
    return sweep


def rerun(sweep_id: int, user: Any = None) -> Sweep:
    """A new sweep with the same parameters and engine (checked again: the bounds may be
    newer than the sweep)."""
    original = Sweep.objects.get(pk=sweep_id)
    params = params_of(original)
    params.validate()
    return create_sweep(
        params, engine=original.engine, user=user, rerun_of=original, name=original.name
    )


def set_label(sweep_id: int, name: str, note: str) -> None:
    """A sweep's name and note (any state: they describe it, they change no measurement)."""
    Sweep.objects.filter(pk=sweep_id).update(name=name[:120], note=note)


# --- running a claimed sweep ------------------------------------------------------------------


class _Monitor(threading.Thread):
    """Beats the heartbeat and reads the cancel flag, off the engine's event loop."""

    def __init__(self, sweep_id: int) -> None:
        super().__init__(name=f"sweep-{sweep_id}-monitor", daemon=True)
        self.sweep_id = sweep_id
        self.cancel = False
        self.lost = False  # no longer RUNNING (e.g. declared interrupted): stop
        self._stop_event = threading.Event()

    def run(self) -> None:
        last_beat = 0.0
        try:
            while not self._stop_event.wait(CANCEL_POLL_S):
                try:
                    if time.monotonic() - last_beat >= HEARTBEAT_EVERY_S:
                        last_beat = time.monotonic()
                        if not Sweep.objects.filter(pk=self.sweep_id, state=State.RUNNING).update(
                            heartbeat_at=timezone.now()
                        ):
                            self.lost = True
                    flag = (
                        Sweep.objects.filter(pk=self.sweep_id)
                        .values_list("cancel_requested", flat=True)
                        .first()
                    )
                    self.cancel = bool(flag)
                except Exception as exc:  # noqa: BLE001 - a locked DB must not end the sweep
                    log.warning("sweep #%s monitor: %s", self.sweep_id, exc)
        finally:
            connections.close_all()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def latency_fields(lat: stats.LatencySummary | None) -> dict[str, float | None]:
    if lat is None:
        return {k: None for k in ("avg_us", "p50_us", "p90_us", "p95_us", "p99_us")}
    return {
        "avg_us": lat.avg_us,
        "p50_us": lat.p50_us,
        "p90_us": lat.p90_us,
        "p95_us": lat.p95_us,
        "p99_us": lat.p99_us,
    }


def _server_fields(server: Any) -> dict[str, float | None]:
    keys = ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us")
    if server is None:
        return {"server_request_us": None, **{k: None for k in keys}}
    return {"server_request_us": server.request_us, **{k: getattr(server, k) for k in keys}}


def _gpu_fields(sample: Any) -> dict[str, float | None]:
    if sample is None:
        return {}
    return {"gpu_utilization": sample.utilization, "gpu_memory_bytes": sample.memory_used_bytes}


def point_json(p: SweepPoint) -> dict[str, Any]:
    return {
        "level": p.level,
        "window": p.window,
        "throughput": p.throughput,
        "requests": p.requests,
        "errors": p.errors,
        "duration_s": p.duration_s,
        "avg_us": p.avg_us,
        "p50_us": p.p50_us,
        "p90_us": p.p90_us,
        "p95_us": p.p95_us,
        "p99_us": p.p99_us,
        "server_request_us": p.server_request_us,
        "queue_us": p.queue_us,
        "compute_input_us": p.compute_input_us,
        "compute_infer_us": p.compute_infer_us,
        "compute_output_us": p.compute_output_us,
        "stable": p.stable,
        "extra": p.extra,
    }


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
        return "avg_us" if self.params.percentile == "avg" else f"p{int(self.params.percentile)}_us"

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
        point = self._upsert(
            w.level,
            self._window_number(w.index),
            {
                "throughput": w.throughput,
                "requests": w.requests,
                "errors": w.errors,
                "duration_s": w.duration_s,
                **latency_fields(w.latency),
                **_server_fields(w.server),
                "stable": None,
                "extra": {
                    "client_cpu_us": w.client_cpu_us,
                    "send_rate": w.send_rate,
                    "error_messages": w.error_messages,
                    "avg_batch": w.server.avg_batch_size if w.server else None,
                    "round": self.round,
                    **_gpu_fields(w.gpu),
                },
            },
        )
        # closed_at: lets viewers (and benchmarks/bench_live.py) see the delivery delay.
        events.publish(
            self.group,
            "sweep.window",
            {"sweep": self.sweep.pk, "point": point_json(point), "closed_at": w.closed_at},
        )
        self._check_errors(w.level, w.errors, w.error_messages)

    def level(self, lv: LevelResult) -> None:
        cancelled = lv.cancelled or bool(self.abort)
        fields = {
            "throughput": lv.throughput,
            "requests": lv.latency.count if lv.latency else 0,
            "errors": lv.errors,
            "duration_s": sum(w.duration_s for w in lv.windows),
            **latency_fields(lv.latency),
            **_server_fields(lv.server),
            "stable": lv.stable,
            "extra": {
                "windows": len(lv.windows),
                "throughput_spread": _finite(lv.throughput_spread),
                "latency_spread": _finite(lv.latency_spread),
                "over_threshold": lv.over_threshold,
                "cancelled": cancelled,
                "client_cpu_us": lv.client_cpu_us,
                "avg_batch": lv.server.avg_batch_size if lv.server else None,
                "send_rate": lv.send_rate,
                "behind_schedule": lv.behind_schedule,
                **_gpu_fields(lv.gpu),
            },
        }
        self._store_level(lv.level, fields, cancelled)

    # perf_analyzer's streamed output
    def pa_window(self, w: Any) -> None:
        point = self._upsert(
            w.level,
            self._window_number(w.index),
            {
                "throughput": w.throughput,
                self.chosen_key: w.latency_us,
                "extra": {"engine": "perf_analyzer", "round": self.round},
            },
        )
        events.publish(
            self.group, "sweep.window", {"sweep": self.sweep.pk, "point": point_json(point)}
        )

    def pa_level(self, lv: Any) -> None:
        pct = lv.percentiles_us
        server = lv.server
        fields: dict[str, Any] = {
            "throughput": lv.throughput,
            "requests": lv.request_count,
            "avg_us": lv.avg_latency_us,
            "p50_us": pct.get(50),
            "p90_us": pct.get(90),
            "p95_us": pct.get(95),
            "p99_us": pct.get(99),
            "server_request_us": server.get("request_us"),
            "queue_us": server.get("queue_us"),
            "compute_input_us": server.get("compute_input_us"),
            "compute_infer_us": server.get("compute_infer_us"),
            "compute_output_us": server.get("compute_output_us"),
            "stable": lv.stable,
            "extra": {
                "windows": len(lv.windows),
                "over_threshold": lv.over_threshold,
                "cancelled": False,
                "engine": "perf_analyzer",
            },
        }
        # perf_analyzer prints no summary for a level that did not settle, nor for the one
        # that went over the latency threshold: their last 3 windows (as they would have
        # been merged) stand for them. A level with neither was cut short (cancelled).
        from_windows = (
            not lv.request_count and bool(lv.windows) and (not lv.stable or lv.over_threshold)
        )
        cancelled = not lv.request_count and not from_windows
        if from_windows:
            last = lv.windows[-stats.STABILITY_WINDOWS :]
            tputs = [w.throughput for w in last]
            lats = [w.latency_us for w in last]
            fields["throughput"] = sum(tputs) / len(tputs)
            fields[self.chosen_key] = sum(lats) / len(lats)
            fields["extra"].update(
                throughput_spread=_finite(stats.spread(tputs)),
                latency_spread=_finite(stats.spread(lats)),
                from_windows=True,
            )
        fields["extra"]["cancelled"] = cancelled
        self._store_level(lv.level, fields, cancelled)

    def set_average(self, level: float, avg_us: float) -> None:
        """perf_analyzer's average latency of this round, read from its CSV afterwards."""
        row = SweepPoint.objects.filter(
            sweep_id=self.sweep.pk, level=level_key(level), window=SweepPoint.LEVEL
        ).first()
        if row is None:
            return
        rounds = row.extra.get("rounds")
        if not rounds:
            if row.avg_us is None:
                SweepPoint.objects.filter(pk=row.pk).update(avg_us=avg_us)
            return
        for record in rounds:
            if record.get("round") == self.round and record.get("avg_us") is None:
                record["avg_us"] = avg_us
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


def execute(sweep_id: int) -> str:
    """Run a sweep this process has claimed, to its end; returns the final state.

    Never leaves the sweep RUNNING: every way out goes through `finish`. Rounds run one
    after another, each over every level it still needs (`round_levels`), so a resumed
    sweep measures only what is missing.
    """
    sweep = Sweep.objects.get(pk=sweep_id)
    params = params_of(sweep)
    _drop_incomplete(sweep, rounds_done(sweep), params)
    publish_state(sweep)
    monitor = _Monitor(sweep_id)
    recorder = _Recorder(sweep, params)
    recorder.commands = [line for line in sweep.command.splitlines() if line]
    monitor.start()
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
                state, error = _run_perf_analyzer(sweep, run_params, todo, monitor, recorder)
            else:
                state, error = _run_builtin(run_params, todo, monitor, recorder)
            if state != State.SUCCEEDED or _should_cancel(monitor, recorder):
                break
    except SweepError as exc:
        state, error = State.FAILED, str(exc)
    except Exception as exc:  # noqa: BLE001 - whatever happened, the sweep must not stay running
        from celery.exceptions import SoftTimeLimitExceeded

        if isinstance(exc, SoftTimeLimitExceeded):
            state, error = State.FAILED, "time limit exceeded: the sweep took longer than planned"
        else:
            log.exception("sweep #%s failed", sweep_id)
            state, error = State.FAILED, f"unexpected error: {exc}"
    finally:
        monitor.stop()
        recorder.close()
    if state == State.SUCCEEDED and recorder.abort:
        state, error = State.FAILED, recorder.abort
    if state == State.SUCCEEDED and monitor.cancel:
        state = State.CANCELLED
    return finish(sweep_id, state, error)


def _should_cancel(monitor: _Monitor, recorder: _Recorder) -> bool:
    return monitor.cancel or monitor.lost or bool(recorder.abort)


def _run_builtin(
    params: SweepParams, levels: list[float], monitor: _Monitor, recorder: _Recorder
) -> tuple[str, str]:
    async def main() -> Any:
        return await run_sweep(
            params,
            engine_url(params.protocol),
            on_window=lambda w: recorder.call(recorder.window, w),
            on_level=lambda lv: recorder.call(recorder.level, lv),
            should_cancel=lambda: _should_cancel(monitor, recorder),
            metrics_url=engine_metrics_url(),
            levels=levels,
        )

    result = asyncio.run(main())
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
    sweep: Sweep,
    params: SweepParams,
    levels: list[float],
    monitor: _Monitor,
    recorder: _Recorder,
) -> tuple[str, str]:
    """perf_analyzer over `levels`. It exits (2) at the first level that does not settle
    within max windows, so the run goes on after that level with a new invocation: every
    level is kept (the unstable one from the windows it printed) and every invocation's
    exact command is stored, one per line."""
    from .engine.perf_analyzer import (
        PerfAnalyzerNotFound,
        locate_perf_analyzer,
        run_perf_analyzer,
    )

    url = engine_url(params.protocol)
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
                    should_cancel=lambda: _should_cancel(monitor, recorder),
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
                if level is not None and avg is not None:
                    recorder.run(recorder.set_average, level, avg)
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


def finish(sweep_id: int, state: str, error: str = "") -> str:
    """RUNNING -> a final state (only from RUNNING: a sweep the watchdog already declared
    interrupted stays so), with the summary; frees the slot and starts the next sweep."""
    updated = Sweep.objects.filter(pk=sweep_id, state=State.RUNNING).update(
        state=state, error=error, finished_at=timezone.now()
    )
    sweep = Sweep.objects.get(pk=sweep_id)
    if updated:
        Sweep.objects.filter(pk=sweep_id).update(summary=knee_summary(sweep))
        sweep.refresh_from_db()
    release(sweep_id)
    if updated:
        publish_state(sweep)
        publish_summary(sweep)
        events.notify(
            sweep.created_by_id,
            f"Your sweep #{sweep.pk} of {sweep.model} {sweep.state}.",
            f"/sweeps/{sweep.pk}/",
        )
    dispatch_next(sweep.server)
    return sweep.state


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
        "model": sweep.model,
        "version": sweep.version,
        "server": sweep.server,
        "engine": sweep.engine,
        "state": sweep.state,
        "error": sweep.error,
        "params": sweep.params,
        "command": sweep.command,
        "config_sha256": sweep.config_sha256,
        "created_by": sweep.created_by.get_username() if sweep.created_by else "",
        "created_at": sweep.created_at.isoformat() if sweep.created_at else None,
        "started_at": sweep.started_at.isoformat() if sweep.started_at else None,
        "finished_at": sweep.finished_at.isoformat() if sweep.finished_at else None,
        "heartbeat_at": sweep.heartbeat_at.isoformat() if sweep.heartbeat_at else None,
        "cancel_requested": sweep.cancel_requested,
        "levels_total": sweep.levels_total,
        "queue_position": queue_position(sweep),
        "summary": sweep.summary if sweep.finished else knee_summary(sweep),
        "name": sweep.name,
        "note": sweep.note,
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


def publish_state(sweep: Sweep) -> None:
    events.publish(
        sweep.group,
        "sweep.state",
        {
            "sweep": sweep.pk,
            "state": sweep.state,
            "error": sweep.error,
            "cancel_requested": sweep.cancel_requested,
            "queue_position": queue_position(sweep),
        },
    )


def publish_summary(sweep: Sweep) -> None:
    events.publish(
        sweep.group,
        "sweep.summary",
        {"sweep": sweep.pk, "state": sweep.state, "error": sweep.error, "summary": sweep.summary},
    )
