"""Ranking a search's candidates: the ranked table, the Pareto front and the one-sentence
recommendation (`summarize`), from each candidate's score (`scoring`).

Candidates re-measured side by side (`confirm`) rank first, on the medians of their rounds;
re-measured candidates whose objective ranges overlap the best one's are tied with it, and
a current config tied with the best is the recommendation (keep it).
"""

from __future__ import annotations

from typing import Any

from .. import measure, repeats
from ..models import Search, SearchCandidate
from . import confirm, objective
from .scoring import constraints_of, effective_levels, metrics_of, score_of, spread_of
from .space import Knobs, diff


def _median_text(
    spread: repeats.Spread | None, objective_name: str, metrics: objective.Metrics
) -> str:
    if spread is None:
        return ""
    metric = metrics.latency if objective_name in objective.MINIMISE else metrics.throughput
    return f"{metric.text(spread.median)} {confirm.spread_text(spread)}".strip()


def summarize(search: Search) -> dict[str, Any]:
    """The ranked table, the Pareto front and the one-sentence recommendation.

    Candidates re-measured side by side (confirm.py) rank first, on the medians of their
    rounds; the others follow on their one measurement. Re-measured candidates whose
    objective ranges overlap the best one's are tied with it; a current config tied with
    the best is the recommendation (keep it)."""
    c, m = constraints_of(search), metrics_of(search)
    candidates = list(search.candidates.all())
    scored = {cand.key: score_of(cand, search) for cand in candidates}
    spreads = {cand.key: spread_of(cand, search) for cand in candidates}
    re_measured = [cand for cand in candidates if len(confirm.good_rounds(cand.rounds or [])) >= 2]
    others = [cand for cand in candidates if cand not in re_measured]
    ranked = objective.rank([(cand, scored[cand.key]) for cand in re_measured]) + objective.rank(
        [(cand, scored[cand.key]) for cand in others]
    )
    best_cand, best_score = ranked[0] if ranked else (None, None)
    best_spread = spreads.get(best_cand.key) if best_cand is not None else None

    def tied(cand: SearchCandidate) -> bool:
        mine = spreads.get(cand.key)
        if best_cand is None or cand is best_cand or mine is None or best_spread is None:
            return False
        s = scored[cand.key]
        return bool(s and s.feasible) and mine.overlaps(best_spread)

    rows = []
    for position, (cand, s) in enumerate(ranked, start=1):
        level = s.level if s else None
        spread = spreads.get(cand.key)
        rows.append(
            {
                "rank": position,
                "key": cand.key,
                "seq": cand.seq,
                "baseline": cand.baseline,
                "state": cand.state,
                "description": Knobs.from_json(cand.knobs).describe(),
                "diff": diff(Knobs.from_json(search.baseline), Knobs.from_json(cand.knobs)),
                "feasible": bool(s and s.feasible),
                "objective": s.objective if s else None,
                "concurrency": level.concurrency if level else None,
                # The two metrics the search judges on (search_json's "metrics" names them),
                # and infer/s where the first is another.
                "throughput": level.throughput if level else None,
                "latency_us": level.latency_us if level else None,
                "infer_per_s": objective.figure(level, "throughput", m) if level else None,
                "gpu_memory_bytes": cand.gpu_memory_bytes,
                "reason": (s.reason if s else cand.error) or "",
                "rounds": len(confirm.good_rounds(cand.rounds or [])),
                "spread": spread.to_json() if spread else None,
                "spread_text": confirm.spread_text(spread),
                "tied": tied(cand),
            }
        )
    front = pareto_points(candidates, c, m)
    baseline_cand = next((cand for cand in candidates if cand.baseline), None)
    baseline_score = score_of(baseline_cand, search) if baseline_cand else None
    ties = [cand for cand in candidates if tied(cand)]
    if best_cand is None or best_score is None:
        sentence = "No candidate has been measured yet."
        if candidates and all(cand.state == SearchCandidate.State.FAILED for cand in candidates):
            sentence = "No candidate could be measured: " + (candidates[0].error or "failed")
        best_key = None
    elif not best_score.feasible:
        sentence = (
            f"No candidate meets the constraints; the nearest is "
            f"{Knobs.from_json(best_cand.knobs).describe()} ({best_score.reason})."
        )
        best_key = None
    elif best_cand.baseline:
        assert best_score.level is not None
        sentence = (
            f"The current config ({Knobs.from_json(best_cand.knobs).describe()}) is already "
            f"the best: {m.throughput.text(best_score.level.throughput)} at {m.latency.label} "
            f"{m.latency.text(best_score.level.latency_us)}."
        )
        best_key = best_cand.key
    elif baseline_cand is not None and baseline_cand in ties:
        # No change is better than a change within noise.
        sentence = (
            f"The current config ({Knobs.from_json(baseline_cand.knobs).describe()}) is as "
            f"good as the best candidate within noise: "
            f"{_median_text(spreads[baseline_cand.key], search.objective, m)} against "
            f"{_median_text(best_spread, search.objective, m)} for "
            f"{Knobs.from_json(best_cand.knobs).describe()}; keep it."
        )
        best_cand, best_key = baseline_cand, baseline_cand.key
        ties = []
    else:
        sentence = objective.gain_sentence(
            Knobs.from_json(best_cand.knobs).describe(),
            best_score,
            baseline_score,
            c,
            search.objective,
            m,
        )
        best_key = best_cand.key
    if best_key is not None and best_spread is not None and best_cand is ranked[0][0]:
        half = best_spread.half_range or 0.0
        sentence = (
            sentence.rstrip(".") + f" (median of {best_spread.rounds} rounds, ± {half * 100:.0f}%)."
        )
    if best_key is not None and ties:
        names = "; ".join(f"#{t.seq} {Knobs.from_json(t.knobs).describe()}" for t in ties)
        sentence += f" Tied with it within noise: {names}."
    best_row = next((r for r in rows if r["key"] == best_key), None)
    if best_row is not None and best_key != (ranked[0][0].key if ranked else None):
        best_row["recommended"] = True
    return {
        "rows": rows,
        # The Pareto front, computed here only: [key, concurrency] pairs, and the points the
        # page and the report draw (sorted by latency).
        "front": [[p["key"], p["concurrency"]] for p in front],
        "front_points": front,
        "best_key": best_key,
        # The one operating point the chart marks "best": the candidate and concurrency.
        "best_point": [best_key, best_row["concurrency"]] if best_row else None,
        "recommendation": sentence,
        "re_measured": len(re_measured),
        "runs": sum(1 for cand in candidates if cand.state != SearchCandidate.State.MEASURING),
    }


def pareto_points(
    candidates: list[SearchCandidate], c: objective.Constraints, m: objective.Metrics
) -> list[dict[str, Any]]:
    """The measured levels on the Pareto front of the search's two metrics (each candidate
    at the levels it is judged on), sorted by latency, with what a chart labels them with."""
    points = []
    for cand in candidates:
        if cand.state != SearchCandidate.State.MEASURED:
            continue
        for row in effective_levels(cand):
            lv = measure.Level.from_json(row)
            p = m.point(lv, c)
            if p is not None and lv.throughput > 0 and p.throughput > 0:
                points.append(
                    objective.Point(p.throughput, p.latency_us, (cand, lv, row.get("rounds")))
                )
    return [
        {
            "key": cand.key,
            "seq": cand.seq,
            "baseline": cand.baseline,
            "description": Knobs.from_json(cand.knobs).describe(),
            "concurrency": lv.level,
            "throughput": p.throughput,
            "latency_us": p.latency_us,
            "rounds": rounds,
        }
        for p in objective.pareto_front(points)
        for cand, lv, rounds in [p.payload]
    ]
