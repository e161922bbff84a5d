"""Which candidates to measure: the exhaustive grid, or quick hill climbing.

Both take `evaluate(knobs) -> Score | None` (measure one candidate, or read it back when
it was measured before: that is what makes a resumed search skip finished candidates)
and call it once per distinct candidate. `evaluate` may raise (cancel, lost worker): the
strategy stops there and the caller keeps what was measured.

Quick mode is coordinate hill climbing from the current config, in the spirit of Model
Analyzer's quick search: start at the grid point nearest the current config, then for
each knob (dynamic batching first, then instance count, max_batch_size, preferred sizes)
step up, or else down, and keep stepping that way while the score improves by more than
`margin`; repeat over the knobs until a full pass moves nowhere or the run budget (a third
of the grid by default) is spent. Whatever the budget, it first tries one more instance and
one batching change from its start (`explore_first`): a search that stopped after the
current config and one neighbour had found nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .objective import Score
from .space import Dimensions, Knobs

Evaluate = Callable[[Knobs], Score | None]
# Dynamic batching, instance count, max_batch_size, preferred sizes: most impact first.
CLIMB_ORDER = (2, 0, 1, 3)
DEFAULT_MARGIN = 0.01


@dataclass
class Trace:
    """What a strategy measured, in order, and the best candidate among them."""

    order: list[str] = field(default_factory=list)
    scores: dict[str, Score | None] = field(default_factory=dict)
    knobs: dict[str, Knobs] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return len(self.order)

    def best(self) -> tuple[Knobs, Score] | None:
        found = [(self.knobs[k], s) for k, s in self.scores.items() if s is not None]
        if not found:
            return None
        return max(found, key=lambda item: item[1].sort_key())


class _Cached:
    def __init__(self, evaluate: Evaluate, trace: Trace) -> None:
        self.evaluate = evaluate
        self.trace = trace

    def __call__(self, knobs: Knobs) -> Score | None:
        key = knobs.key
        if key not in self.trace.scores:
            result = self.evaluate(knobs)
            self.trace.order.append(key)
            self.trace.scores[key] = result
            self.trace.knobs[key] = knobs
        return self.trace.scores[key]


def grid_runs(dims: Dimensions, baseline: Knobs) -> int:
    """How many candidates the exhaustive grid measures (the current config included)."""
    keys = {k.key for k in dims.grid()}
    return len(keys | {baseline.key})


def quick_budget(dims: Dimensions, baseline: Knobs) -> int:
    """Quick mode's run budget: a third of the grid's runs (at least 2)."""
    return max(2, math.floor(grid_runs(dims, baseline) / 3))


# The moves quick mode always tries from its start: (dimension, directions in order).
# One more instance; a batching change (one step up: on, or a longer delay; else down).
EXPLORE_FIRST = ((0, (1,)), (2, (1, -1)))


def quick_runs(dims: Dimensions, baseline: Knobs, max_runs: int | None = None) -> int:
    """The most candidates quick mode measures: its budget, but never fewer than the
    current config, the start point and the moves of EXPLORE_FIRST."""
    budget = max_runs if max_runs is not None else quick_budget(dims, baseline)
    return min(grid_runs(dims, baseline), max(budget, 2 + len(EXPLORE_FIRST)))


def grid(dims: Dimensions, baseline: Knobs, evaluate: Evaluate) -> Trace:
    """The current config first (the reference for gains), then every grid candidate."""
    trace = Trace()
    run = _Cached(evaluate, trace)
    run(baseline)
    for knobs in dims.grid():
        run(knobs)
    return trace


def hill_climb(
    dims: Dimensions,
    baseline: Knobs,
    evaluate: Evaluate,
    *,
    max_runs: int | None = None,
    margin: float = DEFAULT_MARGIN,
) -> Trace:
    """Coordinate hill climbing from the grid point nearest the current config."""
    budget = max_runs if max_runs is not None else quick_budget(dims, baseline)
    trace = Trace()
    run = _Cached(evaluate, trace)
    run(baseline)
    point = dims.nearest(baseline)
    best = run(dims.knobs(point))
    # Before the budget may stop it: the moves of EXPLORE_FIRST, and the climb starts from
    # the best of them.
    start = point
    for dim, directions in EXPLORE_FIRST:
        for direction in directions:
            nxt = dims.neighbours(start, dim, direction)
            if nxt is None:
                continue
            result = run(dims.knobs(nxt))
            if result is not None and result.better_than(best, margin):
                point, best = nxt, result
            break

    def spent() -> bool:
        return trace.runs >= budget

    moved_in_pass = True
    while moved_in_pass and not spent():
        moved_in_pass = False
        for dim in CLIMB_ORDER:
            for direction in (1, -1):
                moved = False
                while not spent():
                    nxt = dims.neighbours(point, dim, direction)
                    if nxt is None:
                        break
                    result = run(dims.knobs(nxt))
                    if result is None or not result.better_than(best, margin):
                        break
                    point, best, moved = nxt, result, True
                if moved:
                    moved_in_pass = True
                    break  # improved going this way: no need to try the other
            if spent():
                break
    return trace
