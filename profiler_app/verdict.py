"""The verdict of a sweep: its knee, its best level within the budget, one recommendation
sentence, how sure it is, when some levels did not settle one caveat sentence, and when
the load generator's machine was short of CPU one note saying the host is the noise.

The rules, and why:
- Levels that settled (perf_analyzer's stability rule over the last 3 windows, or the
  built-in engine's interval of the median within the stability percentage, see
  `engine.stats.settle`) decide the knee and the best level: an unstable level's figures
  are less sure than a settled one's. Unstable levels stay on the charts (drawn hollow)
  and are named, with their spread, in the caveat: "Levels 6–8 did not settle within 10
  windows (spread 18%): the knee is uncertain; raise max windows or the window length."
  The knee is called uncertain when an unstable level lies within the levels that decided
  it (up to the settled level after the knee); otherwise the unstable levels are only
  left out.
- The verdict still answers, from what was measured, when no level settled, or when
  unstable levels decide the knee and carry intervals (the built-in engine's, so how
  unsure they are is known): the knee of every measured level (an unsettled one is the
  median of its windows, with its interval: "1,150 ± 90 infer/s"), opened by "No level
  settled within N windows" (or "Not every level settled ...") and graded "unsure".
  Unstable levels without intervals (perf_analyzer's, rows stored before intervals) that
  decide the knee leave it to the settled levels, as before, also graded "unsure".
- How sure (`sureness`): "settled" when every level the knee rests on (up to the level
  after it) met perf_analyzer's rule and no unstable level could move it: the sentence as
  it always was; "within" when one of them settled by its interval, whose ± then shows in
  the sentence and the grade names the widest; "unsure" otherwise, naming how wide the
  intervals are (or the spreads, without intervals) and whether the knee's neighbours
  overlap it (then the knee could as well be a level either side).
- The host note (`host_note`) names the levels during which the load generator's machine
  was busy (`engine.host_load`: 90% of its CPU time or more, or 5% stolen by a
  hypervisor), how busy, how much of it was the load generator, and whether Triton's
  address is on that machine (then Triton and the load generator competed for the same
  CPUs): the figures describe Triton on that busy machine.
- A sweep that did not finish (failed, cancelled, interrupted, or still running) states
  what it measured and recommends nothing beyond it: never "try higher loads".
- "Try higher loads" needs the last level of the range to be one the verdict read: when
  the last levels did not settle (and were left out), the curve's end is not known.
- A sweep of an ensemble or a BLS model (levels with `extra["steps"]`) names the step that
  takes the largest share of the steps' compute at the knee, or at the last settled level
  when there is no knee: where to look first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import measure
from .engine import host_load, stats
from .params import SweepParams
from .search import objective

UNFINISHED = {
    "failed": "failed",
    "cancelled": "was cancelled",
    "interrupted": "was interrupted",
}


@dataclass(frozen=True)
class LevelView:
    """One level summary row, as the verdict reads it."""

    level: float
    throughput: float
    latency_us: float | None  # the chosen latency (avg or pN)
    stable: bool  # False only when the level is known not to have settled
    spread: float | None  # the widest of the throughput and latency spreads, as a fraction
    over_threshold: bool = False
    interval: measure.LevelInterval | None = None  # None: stored before, or perf_analyzer's
    host: Mapping[str, Any] | None = None  # the load generator's machine (`host_load`)

    @property
    def usable(self) -> bool:
        return self.latency_us is not None and self.throughput > 0

    @property
    def margin(self) -> float | None:
        """± infer/s around the throughput, from the interval; None without one."""
        return self.interval.margin(self.throughput) if self.interval else None

    @property
    def relative_margin(self) -> float | None:
        return self.interval.relative(self.throughput) if self.interval else None

    @property
    def by_interval(self) -> bool:
        return self.stable and self.interval is not None and self.interval.settled_by == "interval"

    @property
    def host_busy(self) -> bool:
        host = self.host or {}
        busy, steal = host.get("busy"), host.get("steal")
        return (isinstance(busy, int | float) and busy >= host_load.BUSY_SHARE) or (
            isinstance(steal, int | float) and steal >= host_load.STEAL_SHARE
        )


def _get(point: Any, name: str) -> Any:
    return point.get(name) if isinstance(point, Mapping) else getattr(point, name)


def measured(point: Any) -> bool:
    """A level row that holds a measurement: not cut short, with requests or throughput
    (perf_analyzer prints no request count for a level that did not settle)."""
    extra = _get(point, "extra") or {}
    if extra.get("cancelled"):
        return False
    return (_get(point, "requests") or 0) > 0 or (_get(point, "throughput") or 0) > 0


def level_view(point: Any, percentile: int | str) -> LevelView:
    """From a SweepPoint (level row) or its `point_json` dict."""
    key = "avg_us" if percentile == "avg" else f"p{int(percentile)}_us"
    extra = _get(point, "extra") or {}
    spreads = [
        v
        for v in (extra.get("throughput_spread"), extra.get("latency_spread"))
        if v is not None and math.isfinite(v)
    ]
    return LevelView(
        level=float(_get(point, "level")),
        throughput=float(_get(point, "throughput") or 0.0),
        latency_us=_get(point, key),
        # None: a row without the flag (hand-made); only an explicit False is unstable.
        stable=_get(point, "stable") is not False,
        spread=max(spreads) if spreads else None,
        over_threshold=bool(extra.get("over_threshold")),
        interval=measure.interval_of(point),
        host=extra.get(measure.HOST) if isinstance(extra.get(measure.HOST), Mapping) else None,
    )


def levels_text(levels: Sequence[float], step: float) -> str:
    """'6–8', '2, 6–8' or '4': runs of consecutive levels (by the range's step) joined."""
    runs: list[list[float]] = []
    for level in sorted(levels):
        if runs and math.isclose(level - runs[-1][-1], step, rel_tol=1e-6, abs_tol=1e-9):
            runs[-1].append(level)
        else:
            runs.append([level])
    parts = [f"{r[0]:g}" if len(r) == 1 else f"{r[0]:g}–{r[-1]:g}" for r in runs]
    return ", ".join(parts)


def _caveat(
    unstable: Sequence[LevelView], params: SweepParams, decisive: bool, nothing_settled: bool
) -> str:
    if not unstable:
        return ""
    names = levels_text([u.level for u in unstable], params.step)
    noun = "Level" if len(unstable) == 1 else "Levels"
    spreads = [u.spread for u in unstable if u.spread is not None]
    spread = ""
    if spreads:
        widest = max(spreads) * 100
        shown = f"{widest:.0f}%" if math.isfinite(widest) else "unbounded"
        spread = f" (spread {'up to ' if len(spreads) > 1 else ''}{shown})"
    rounds = f" in at least one of {params.rounds} rounds" if params.rounds > 1 else ""
    head = f"{noun} {names} did not settle within {params.max_windows} windows{rounds}{spread}"
    advice = "raise max windows or the window length"
    if nothing_settled:
        return f"{head}: {advice}."
    if decisive:
        return f"{head}: the knee is uncertain; {advice}."
    pronoun = "it is" if len(unstable) == 1 else "they are"
    return f"{head}, so {pronoun} left out of the verdict; {advice}."


def _best_within(
    curve: Sequence[stats.CurvePoint], budget_ms: float, percentile: int | str
) -> stats.CurvePoint | None:
    """The highest throughput within the budget: a search's max-throughput score, so a
    sweep's "best" and a search's pick follow one rule."""
    constraints = objective.Constraints(latency_budget_ms=budget_ms, percentile=percentile)
    found = objective.score(curve, constraints, "max_throughput")
    return found.level if found is not None and found.feasible else None


def step_sentence(point: Any, label: str) -> str:
    """The sentence naming a level row's step with the largest share of the steps'
    compute (" add_batched takes 61% of compute at concurrency 8."); "" without steps."""
    if point is None:
        return ""
    shares = [
        (float(s.compute_share), str(s.model))
        for s in measure.steps_of(point)
        if s.compute_share is not None
    ]
    if not shares:
        return ""
    share, model = max(shares, key=lambda item: item[0])
    level = float(_get(point, "level"))
    return f" {model} takes {share * 100:.0f}% of compute at {label} {level:g}."


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.0f}%"


def _intervals_text(views: Sequence[LevelView]) -> str:
    """'95% intervals of the median over up to 9 windows' for the views' intervals."""
    known = [v.interval for v in views if v.interval is not None]
    if not known:
        return ""
    confidence = min(i.confidence for i in known)
    windows = max(i.windows for i in known)
    return f"{confidence * 100:.0f}% intervals of the median over up to {windows} windows"


def _overlap(a: LevelView, b: LevelView) -> bool:
    if a.interval is None or b.interval is None:
        return False
    return a.interval.low <= b.interval.high and b.interval.low <= a.interval.high


def _known_text(views: Sequence[LevelView], subject: str) -> str:
    """How well `views` are known: their widest interval, or their spreads without one."""
    margins = [m for m in (v.relative_margin for v in views) if m is not None]
    if margins:
        return (
            f"{subject} known to ±{_pct(max(margins))} of their throughput "
            f"({_intervals_text(views)})"
        )
    spreads = [v.spread for v in views if v.spread is not None]
    # perf_analyzer's levels, and the built-in engine's stored before intervals.
    return "no interval was recorded for them" + (
        f" (their last 3 windows spread up to {_pct(max(spreads))})" if spreads else ""
    )


def sureness(
    used: Sequence[LevelView],
    knee: stats.Knee | None,
    from_measured: bool,
    params: SweepParams,
    decisive: Sequence[LevelView] = (),
) -> tuple[str | None, str]:
    """(grade, sentence) for the levels the verdict read (see the module docstring);
    `decisive`: levels that did not settle and could have moved the knee of the settled
    ones."""
    if not used:
        return None, ""
    rested = list(used) if knee is None else list(used[: knee.index + 2])
    unsettled = [v for v in used if not v.stable]
    if from_measured:
        head = (
            "no level settled"
            if len(unsettled) == len(used)
            else f"{_levels_noun(unsettled, params)} did not settle"
        )
        text = (
            f"Unsure: {head}, so this is read from what was measured; "
            f"{_known_text(rested, 'the levels it rests on are')}"
        )
        if knee is not None:
            at = used[knee.index]
            near = [used[i] for i in (knee.index - 1, knee.index + 1) if 0 <= i < len(used)]
            if any(_overlap(at, n) for n in near):
                text += (
                    "; the levels next to it overlap it, so the knee could as well be one of them"
                )
        return "unsure", text + "."
    if decisive:
        return "unsure", (
            f"Unsure: {_levels_noun(decisive, params)} did not settle and could move the knee; "
            f"{_known_text(decisive, 'they are')}."
        )
    within = [v for v in rested if v.by_interval]
    if not within:
        return "settled", ""
    widest = max((v.relative_margin or 0.0) for v in within)
    return "within", (
        f"Settled within ±{_pct(widest)}: {_levels_noun(within, params)} met the "
        f"{_intervals_text(within)} rather than perf_analyzer's 3-window rule."
    )


def _levels_noun(views: Sequence[LevelView], params: SweepParams) -> str:
    """'level 2' or 'levels 2–4'."""
    noun = "level" if len(views) == 1 else "levels"
    return f"{noun} {levels_text([v.level for v in views], params.step)}"


def host_note(rows: Sequence[LevelView], params: SweepParams) -> str:
    """The sentence saying the host itself was the noise; "" when no level was busy."""
    busy = [v for v in rows if v.host_busy]
    if not busy:
        return ""
    label = "concurrency" if params.mode == "concurrency" else "request rate"
    top = max(busy, key=lambda v: float((v.host or {}).get("busy") or 0.0))
    host = top.host or {}
    cpus = host.get("cpus")
    head = (
        f"The host itself is the noise: during {label} "
        f"{levels_text([v.level for v in busy], params.step)} the load generator's machine "
        f"{'(' + str(cpus) + ' CPUs) ' if cpus else ''}was up to "
        f"{_pct(float(host.get('busy') or 0.0))} busy"
    )
    ours = host.get("load_generator")
    local = any((v.host or {}).get("triton_local") for v in busy)
    if isinstance(ours, int | float):
        rest = "Triton and anything else running" if local else "other processes"
        head += f" (the load generator {_pct(ours)} of it, the rest {rest})"
    steal = max(float((v.host or {}).get("steal") or 0.0) for v in busy)
    if steal >= host_load.STEAL_SHARE:
        head += f", with {_pct(steal)} of its CPU time stolen by the hypervisor"
    if local:
        head += (
            ", and Triton's address is on that machine, so Triton and the load generator "
            "competed for the same CPUs"
        )
    else:
        head += ", so the load generator competed for CPU"
    return (
        f"{head}. The figures and their intervals describe Triton on that busy machine; for "
        "cleaner ones run the load from another machine or stop other work on this one."
    )


def _curve(views: Sequence[LevelView]) -> list[stats.CurvePoint]:
    return [stats.CurvePoint(v.level, v.throughput, float(v.latency_us or 0.0)) for v in views]


def summarize(points: Iterable[Any], params: SweepParams, state: str) -> dict[str, Any]:
    """The verdict of a sweep in `state` from its level rows (SweepPoints or dicts)."""
    points = list(points)
    rows = sorted(
        (level_view(p, params.percentile) for p in points if measured(p)),
        key=lambda v: v.level,
    )
    usable = [v for v in rows if v.usable]
    settled = [v for v in usable if v.stable]
    unstable = [v for v in usable if not v.stable]
    budget = params.latency_threshold_ms
    # Unstable levels that could have moved the settled levels' knee: those up to the
    # settled level after it.
    settled_knee = stats.find_knee(_curve(settled), latency_budget_ms=budget)
    if settled_knee is None or settled_knee.reason == "end":
        limit = settled[0].level if settled_knee is None and settled else math.inf
    else:
        limit = settled[settled_knee.index + 1].level
    decisive = [v for v in unstable if v.level <= limit]
    # Nothing settled, or levels that did not settle decide the knee and carry intervals
    # (so how unsure they are is known): answer from what was measured, graded unsure.
    from_measured = bool(unstable) and (
        not settled or (bool(decisive) and all(v.interval is not None for v in decisive))
    )
    used = usable if from_measured else settled
    curve = _curve(used)
    # Intervals in the sentence where they are what makes the level count: a level settled
    # by its interval, or any level read from what was measured.
    margins = {
        v.level: v.margin for v in used if v.margin is not None and (from_measured or v.by_interval)
    }
    label = "concurrency" if params.mode == "concurrency" else "request rate"
    knee = stats.find_knee(curve, latency_budget_ms=budget)
    best = _best_within(curve, budget, params.percentile) if budget else None

    range_levels = params.levels()
    finished_ok = state == "succeeded"
    last_is_used = bool(used) and math.isclose(used[-1].level, range_levels[-1])
    if state in ("running", "queued"):
        end_note = "throughput is still rising at the last level measured so far"
    elif finished_ok and last_is_used:
        end_note = stats.END_NOTE
    elif settled and any(v.level > settled[-1].level for v in rows):
        end_note = (
            "throughput was still rising at the last level that settled; the levels after it "
            "did not"
        )
    else:
        end_note = (
            "throughput was still rising at the last level measured, and nothing beyond it "
            "was measured"
        )

    if used:
        sentence = stats.recommendation(
            curve,
            mode=params.mode,
            latency_label=params.latency_label,
            latency_budget_ms=budget,
            end_note=end_note,
            margins=margins,
        )
        if best is not None:
            sentence += (
                f" Best within the {budget:g} ms budget: {label} {best.level:g} with "
                f"{stats.throughput_text(best.throughput, margins.get(best.level))} infer/s "
                f"at {params.latency_label} {best.latency_us / 1000:.2f} ms."
            )
        if from_measured:
            head = (
                f"No level settled within {params.max_windows} windows"
                if not settled
                else f"Not every level settled within {params.max_windows} windows"
            )
            sentence = (
                f"{head}, so this is read from what was measured: "
                f"{sentence[:1].lower()}{sentence[1:]}"
            )
    else:
        sentence = "No level completed, so there is nothing to recommend."

    if state in UNFINISHED or state == "running":
        measured_text = (
            f"{label} {levels_text([v.level for v in rows], params.step)} of {params.range_text}"
            if rows
            else ""
        )
        if state in UNFINISHED:
            if rows:
                sentence = (
                    f"The sweep {UNFINISHED[state]} after measuring {measured_text}. {sentence}"
                )
            else:
                sentence = (
                    f"The sweep {UNFINISHED[state]} before any level completed: nothing to "
                    "recommend."
                )
        elif rows:
            sentence = f"So far ({measured_text}): {sentence}"

    if used:
        at = used[knee.index] if knee else used[-1]
        rows_at = [p for p in points if measured(p) and float(_get(p, "level")) == at.level]
        sentence += step_sentence(rows_at[0] if rows_at else None, label)

    grade, sure_text = sureness(used, knee, from_measured, params, decisive)
    return {
        "recommendation": sentence,
        "caveat": _caveat(unstable, params, bool(decisive), nothing_settled=not settled),
        "unstable_levels": [v.level for v in unstable],
        "knee_level": used[knee.index].level if knee else None,
        "knee_reason": knee.reason if knee else None,
        "best_level": best.level if best else None,
        "latency_label": params.latency_label,
        "budget_ms": budget,
        # How sure the recommendation is, and whether the machine itself was the noise.
        "sureness": grade,
        "sureness_text": sure_text,
        "from_measured": from_measured,
        "host_note": host_note(rows, params),
        "host_busy_levels": [v.level for v in rows if v.host_busy],
    }
