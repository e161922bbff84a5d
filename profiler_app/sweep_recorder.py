"""Storing what a sweep measures: points upserted on (sweep, level, window), so a retried or
resumed task never duplicates them, each published to the group `sweep.<id>` right after
it is written (events carry the group's `seq`). A level's summary is the row with
window = -1; with `rounds` R > 1 it holds the median of the level's rounds (`repeats`).
Also what a resumed run still has to measure (`rounds_done`, `round_levels`).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connections

from repository_app import events

from . import measure, repeats, sweep_read, verdict
from .engine.results import LevelResult, WindowResult
from .level_traces import LevelTracer
from .models import Sweep, SweepPoint
from .params import SweepParams


def level_key(level: float) -> float:
    """Levels as stored: rounded, so a resumed range lands on the same keys."""
    return round(float(level), 6)


class Recorder:
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
        # Each level's traced sample (`level_traces`), when the sweep asks for one.
        self.tracer: LevelTracer | None = None
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
        traced = self.tracer.take() if self.tracer is not None and not cancelled else None
        if traced is not None:
            fields = {**fields, "extra": {**(fields.get("extra") or {}), **traced.flat()}}
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
                "point": measure.point_json(point),
                "levels_done": sum(1 for n in self.done.values() if n >= 1),
                "levels_total": self.sweep.levels_total,
                "round": self.round,
                **sweep_read.running_json(self.sweep),
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
                "point": {**measure.point_json(point), "closed_at": m.closed_at},
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
        kept; the level is published again."""
        values = {k: v for k, v in {"avg_us": avg_us, **(own or {})}.items() if v is not None}
        row = SweepPoint.objects.filter(
            sweep_id=self.sweep.pk, level=level_key(level), window=SweepPoint.LEVEL
        ).first()
        if row is None or not values:
            return
        rounds = row.extra.get("rounds")
        if not rounds:
            missing = {k: v for k, v in values.items() if getattr(row, k) is None}
            if not missing:
                return
            SweepPoint.objects.filter(pk=row.pk).update(**missing)
            row.refresh_from_db()
        else:
            for record in rounds:
                if record.get("round") == self.round:
                    record.update({k: v for k, v in values.items() if record.get(k) is None})
            merged = repeats.merge_rounds(rounds, self.chosen_key, row.extra)
            row = self._upsert(level, SweepPoint.LEVEL, merged)
        self._publish_level(row)  # the page draws from events alone: it sees the average too


def rounds_done(sweep: Sweep) -> dict[float, int]:
    """Per level, how many rounds its summary row holds (a measured row without rounds is
    one); levels cut short (cancelled, aborted) are absent."""
    done: dict[float, int] = {}
    for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL):
        if verdict.measured(p):
            done[level_key(p.level)] = len(p.extra.get("rounds") or []) or 1
    return done


def drop_incomplete(sweep: Sweep, done: dict[float, int], params: SweepParams) -> None:
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
