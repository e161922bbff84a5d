"""A ranking that survives noise: the top candidates re-measured side by side in alternating
rounds, judged on their medians, with their spread, tied when the spreads overlap."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from profiler_app.models import Search, SearchCandidate, Sweep
from profiler_app.search import confirm, ranking
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Knobs, Space

BASE = Knobs(1, "KIND_CPU", 32, True, 200)
TWO = Knobs(2, "KIND_CPU", 32, True, 200)
THREE = Knobs(3, "KIND_CPU", 32, True, 200)


def test_re_measurement_alternates_the_order_of_the_candidates():
    assert confirm.order(["a", "b", "c"], 3) == [
        (1, "a"), (1, "b"), (1, "c"), (2, "c"), (2, "b"), (2, "a"), (3, "a"), (3, "b"), (3, "c"),
    ]  # fmt: skip


def _levels(tput: float, p95: float = 1000.0) -> list[dict[str, Any]]:
    return [{"concurrency": 4, "throughput": tput, "p95_us": p95, "stable": True}]


def test_a_candidate_is_judged_on_the_median_of_its_rounds():
    rounds = [{"round": n, "levels": _levels(t, p)} for n, (t, p) in enumerate(
        [(1000, 900), (1100, 1000), (1400, 950)], start=1
    )]  # fmt: skip
    rounds.append({"round": 4, "error": "2 request(s) failed", "levels": []})
    (level,) = confirm.median_levels(rounds)
    assert level["throughput"] == 1100 and level["p95_us"] == 950 and level["rounds"] == 3


def _search(db_rounds: dict[Knobs, tuple[float, list[float]]]) -> Search:
    """A finished search: each candidate's first measurement and its rounds (infer/s)."""
    carrier = Sweep.objects.create(
        model="busy_compute", server="x", state="succeeded", finished_at=timezone.now(),
        kind="search", params={"model": "busy_compute", "start": 4, "end": 4},
    )  # fmt: skip
    search = Search.objects.create(
        sweep=carrier, model="busy_compute", mode="grid", space=Space(counts=(1, 2, 3)).to_json(),
        constraints=Constraints(latency_budget_ms=5).to_json(), baseline=BASE.to_json(),
    )  # fmt: skip
    for seq, (knobs, (first, again)) in enumerate(db_rounds.items(), start=1):
        SearchCandidate.objects.create(
            search=search, key=knobs.key, seq=seq, knobs=knobs.to_json(),
            baseline=knobs == BASE, state="measured", levels=_levels(first),
            rounds=[{"round": n, "levels": _levels(t)} for n, t in enumerate(again, start=1)],
        )  # fmt: skip
    return search


@pytest.mark.django_db
def test_overlapping_spreads_are_a_tie_and_a_tied_current_config_is_kept():
    # Measured once, 2 instances looked 40% better; side by side it is within noise.
    search = _search({BASE: (1000, [1000, 1050, 980]), TWO: (1400, [1020, 1100, 990])})
    result = ranking.summarize(search)
    assert result["best_key"] == BASE.key
    assert result["recommendation"].startswith("The current config (1 CPU instance")
    assert "as good as the best candidate within noise" in result["recommendation"]
    assert "keep it" in result["recommendation"]
    rows = {r["key"]: r for r in result["rows"]}
    assert rows[BASE.key]["tied"] and rows[BASE.key]["rounds"] == 3
    assert rows[TWO.key]["spread_text"] == "± 5% over 3 rounds"  # (1100 - 990) / 2 / 1020
    assert result["best_point"] == [BASE.key, 4]


@pytest.mark.django_db
def test_spreads_apart_are_a_real_gain_stated_with_its_spread():
    search = _search({BASE: (1000, [1000, 1050, 980]), TWO: (1450, [1500, 1520, 1480])})
    result = ranking.summarize(search)
    assert result["best_key"] == TWO.key and not any(r["tied"] for r in result["rows"])
    text = result["recommendation"]
    assert text.startswith("2 CPU instances") and "1.5× throughput" in text
    assert text.endswith("(median of 3 rounds, ± 1%).")


@pytest.mark.django_db
def test_a_candidate_measured_once_ranks_after_the_re_measured_ones():
    # 3 instances' single high reading is the winner's curse: it was not re-measured.
    search = _search(
        {BASE: (1000, [1000, 1050, 980]), TWO: (1450, [1500, 1520, 1480]), THREE: (2000, [])}
    )
    result = ranking.summarize(search)
    assert [r["key"] for r in result["rows"]] == [TWO.key, BASE.key, THREE.key]
    assert result["rows"][2]["rounds"] == 0 and result["rows"][2]["spread"] is None
    assert result["re_measured"] == 2
