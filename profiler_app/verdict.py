"""The verdict of a sweep: its knee, its best level within the budget, one recommendation
sentence and, when some levels did not settle, one caveat sentence.

The rules, and why:
- Only levels that settled (perf_analyzer's stability rule over the last 3 windows) decide
  the knee and the best level: an unstable level's throughput and latency are whatever
  its last windows happened to be. Unstable levels stay on the charts (drawn hollow) and
  are named, with their spread, in the caveat: "Levels 6–8 did not settle within 10 windows
  (spread 18%): the knee is uncertain; raise max windows or the window length." The knee is
  called uncertain when an unstable level lies within the levels that decided it (up to
  the settled level after the knee); otherwise the unstable levels are only left out.
- A sweep that did not finish (failed, cancelled, interrupted, or still running) states
  what it measured and recommends nothing beyond it: never "try higher loads".
- "Try higher loads" needs the last level of the range to have settled: when the last
  levels did not settle, the curve's end is not known.
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
from .engine import stats
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

    @property
    def usable(self) -> bool:
        return self.latency_us is not None and self.throughput > 0


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
        (float(s["compute_share"]), str(s.get("model", "")))
        for s in measure.steps_of(point)
        if s.get("compute_share") is not None
    ]
    if not shares:
        return ""
    share, model = max(shares, key=lambda item: item[0])
    level = float(_get(point, "level"))
    return f" {model} takes {share * 100:.0f}% of compute at {label} {level:g}."


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
    curve = [stats.CurvePoint(v.level, v.throughput, float(v.latency_us or 0.0)) for v in settled]
    budget = params.latency_threshold_ms
    label = "concurrency" if params.mode == "concurrency" else "request rate"
    knee = stats.find_knee(curve, latency_budget_ms=budget)
    best = _best_within(curve, budget, params.percentile) if budget else None

    range_levels = params.levels()
    finished_ok = state == "succeeded"
    last_is_settled = bool(settled) and math.isclose(settled[-1].level, range_levels[-1])
    if state in ("running", "queued"):
        end_note = "throughput is still rising at the last level measured so far"
    elif finished_ok and last_is_settled:
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

    if settled:
        sentence = stats.recommendation(
            curve,
            mode=params.mode,
            latency_label=params.latency_label,
            latency_budget_ms=budget,
            end_note=end_note,
        )
        if best is not None:
            sentence += (
                f" Best within the {budget:g} ms budget: {label} {best.level:g} with "
                f"{best.throughput:,.0f} infer/s at {params.latency_label} "
                f"{best.latency_us / 1000:.2f} ms."
            )
    elif unstable:
        sentence = (
            f"No level settled within {params.max_windows} windows, so there is nothing to "
            "recommend."
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

    if settled:
        at = settled[knee.index] if knee else settled[-1]
        rows_at = [p for p in points if measured(p) and float(_get(p, "level")) == at.level]
        sentence += step_sentence(rows_at[0] if rows_at else None, label)

    # Unstable levels that could have moved the knee: those up to the settled level after it.
    if knee is None or knee.reason == "end":
        limit = settled[0].level if knee is None and settled else math.inf
    else:
        limit = settled[knee.index + 1].level
    decisive = any(v.level <= limit for v in unstable)
    return {
        "recommendation": sentence,
        "caveat": _caveat(unstable, params, decisive, nothing_settled=not settled),
        "unstable_levels": [v.level for v in unstable],
        "knee_level": settled[knee.index].level if knee else None,
        "knee_reason": knee.reason if knee else None,
        "best_level": best.level if best else None,
        "latency_label": params.latency_label,
        "budget_ms": budget,
    }
