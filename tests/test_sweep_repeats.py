"""Repeats: each level measured in rounds (median and spread), and Compare telling a real
difference from noise."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command

from profiler_app import export, repeats, sweeps
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from profiler_app.repeats import Spread
from registry import servers


def _round(n: int, tput: float, p95: float, *, stable: bool = True) -> dict[str, Any]:
    fields = {
        "throughput": tput,
        "p95_us": p95,
        "p50_us": p95 / 2,
        "requests": 100,
        "stable": stable,
        "extra": {"windows": 3, "throughput_spread": 0.01 * n, "latency_spread": 0.02},
    }
    return repeats.round_record(n, fields)


def test_rounds_merge_into_medians_with_their_spread():
    rounds = [_round(1, 1000, 2000), _round(2, 1100, 1800), _round(3, 900, 2600)]
    merged = repeats.merge_rounds(rounds, "p95_us", {"client_cpu_us": 50.0})
    assert merged["throughput"] == 1000 and merged["p95_us"] == 2000 and merged["p50_us"] == 1000
    assert merged["requests"] == 300 and merged["stable"] is True
    extra = merged["extra"]
    assert [r["round"] for r in extra["rounds"]] == [1, 2, 3]
    assert extra["windows"] == 9 and extra["client_cpu_us"] == 50.0
    assert extra["round_spread"] == pytest.approx(0.10)  # (1100 - 900) / 2 / 1000
    assert extra["round_latency_spread"] == pytest.approx(0.20)  # (2600 - 1800) / 2 / 2000
    assert extra["throughput_spread"] == pytest.approx(0.03)  # the widest within a round
    unsettled = repeats.merge_rounds([*rounds[:2], _round(3, 900, 2600, stable=False)], "p95_us")
    assert unsettled["stable"] is False  # stable only when every round settled


def test_a_level_of_one_round_has_no_spread():
    assert Spread.of([1000.0]).half_range is None
    row = {"level": 1, "throughput": 1000.0, "extra": {}}
    assert Spread.of_level(row) == Spread(1000.0, 1000.0, 1000.0, 1)
    with_rounds = {"level": 1, "throughput": 1000.0, "extra": {"rounds": [{"throughput": 900.0}, {"throughput": 1100.0}]}}  # fmt: skip
    assert Spread.of_level(with_rounds).half_range == pytest.approx(0.1)


def test_a_difference_beyond_both_spreads_is_real_and_one_inside_them_is_noise():
    base = Spread.of([1000, 1020, 980])  # ± 2%
    faster = Spread.of([1180, 1200, 1160])  # +18%, ± ~1.7%
    real = repeats.difference(base, faster)
    assert real["real"] is True
    assert real["text"] == "+18% ± 4%, 3 rounds each"
    close = Spread.of([1010, 1060, 990])  # overlaps base's range
    noise = repeats.difference(base, close)
    assert noise["real"] is False and noise["text"].startswith("within noise (+1% ± ")
    slower = repeats.difference(base, Spread.of([800, 810, 790]))
    assert slower["real"] is True and slower["text"].startswith("-20% ± ")


def test_a_difference_without_repeats_says_the_noise_is_unknown():
    once = repeats.difference(Spread.of([1000]), Spread.of([1180]))
    assert once["real"] is None and once["text"].startswith("+18% (one round: noise unknown")
    mixed = repeats.difference(Spread.of([1000, 1010]), Spread.of([1180, 1200, 1190]))
    assert mixed["text"].endswith("2 and 3 rounds")
    assert repeats.difference(Spread.of([]), Spread.of([1.0]))["text"] == "not comparable"


def _sweep(engine: str, levels: dict[float, list[float]], sha: str = "same") -> Sweep:
    sweep = sweeps.create_sweep(
        servers.default(),
        SweepParams(model="add_batched", start=1, end=2, rounds=3),
        engine=engine,
        enqueue=False,
    )
    Sweep.objects.filter(pk=sweep.pk).update(config_sha256=sha, state="succeeded")
    for level, tputs in levels.items():
        rounds = [
            repeats.round_record(n, {"throughput": t, "p95_us": 1e6 / t, "stable": True})
            for n, t in enumerate(tputs, start=1)
        ]
        merged = repeats.merge_rounds(rounds, "p95_us")
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=-1, **{**merged, "requests": 300}
        )
    return Sweep.objects.get(pk=sweep.pk)


@pytest.mark.django_db
def test_compare_lists_old_to_new_with_a_delta_per_level_and_the_engines_ratio(
    redis_db, admin_client
):
    ours = _sweep("builtin", {1: [1000, 1020, 980], 2: [1800, 1850, 1750]})
    theirs = _sweep("perf_analyzer", {1: [1180, 1200, 1160], 2: [1810, 1840, 1790]})
    data = export.compare([theirs, ours])  # asked newest first: listed old -> new
    assert [item["sweep"]["id"] for item in data["sweeps"]] == [ours.pk, theirs.pk]
    deltas = {row["level"]: row for row in data["sweeps"][1]["deltas"]}
    assert deltas[1]["throughput"]["text"] == "+18% ± 4%, 3 rounds each"
    assert deltas[2]["throughput"]["text"].startswith("within noise (+1% ± ")
    assert deltas[1]["base"]["throughput"]["text"] == "1,000.0 ± 2%"
    (ratio,) = data["engine_ratios"]
    assert (ratio["builtin"], ratio["perf_analyzer"]) == (ours.pk, theirs.pk)
    assert ratio["levels"][0]["throughput_ratio"] == pytest.approx(1000 / 1180)
    other_config = _sweep("perf_analyzer", {1: [1000, 1000, 1000]}, sha="other")
    assert export.compare([ours, other_config])["engine_ratios"] == []
    page = admin_client.get(f"/sweeps/compare/?ids={theirs.pk}&ids={ours.pk}").content.decode()
    assert "+18% ± 4%, 3 rounds each" in page and "within noise" in page
    assert "concurrency 1:2:1 × 3 rounds" in page and "1.0:2.0" not in page
    assert f"Built-in engine #{ours.pk} / perf_analyzer #{theirs.pk}" in page


def test_rounds_are_bounded_on_the_command_line():
    with pytest.raises(CommandError, match="--rounds must be between 1 and 10"):
        call_command("perf_sweep", "add_batched", "--rounds", "0")
