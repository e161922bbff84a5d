"""Against the real tritonserver: a level that never settles is kept, marked unstable, and
the sweep goes on (both engines), and rounds alternate over the levels.

Instability is forced, never hoped for: a stability percentage of 0.001% cannot be met by
three real windows, so every level runs to max windows and is reported unstable. These
tests assert the protocol and the stored shape, never a measured value."""

from __future__ import annotations

import csv
import io

import pytest

from profiler_app import export, jobs, sweeps
from profiler_app.engine.perf_analyzer_csv import CSV_COLUMNS
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from registry import servers
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FORCED_UNSTABLE = 0.001  # %


@pytest.fixture()
def add_batched(triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    yield "add_batched"
    client.unload("add_batched")


def _run(params: SweepParams, engine: str) -> Sweep:
    sweep = sweeps.create_sweep(servers.default(), params, engine=engine, enqueue=False)
    assert jobs.claim(sweep.pk)
    jobs.execute(sweep.pk)
    return Sweep.objects.get(pk=sweep.pk)


def _params(**overrides) -> SweepParams:
    base = dict(
        model="add_batched",
        start=1,
        end=2,
        measurement_window_ms=200,
        stability_percentage=FORCED_UNSTABLE,
        max_windows=3,
    )
    return SweepParams(**{**base, **overrides})


def test_perf_analyzer_keeps_every_level_that_did_not_settle_and_goes_on(add_batched, redis_db):
    sweep = _run(_params(rounds=2), "perf_analyzer")
    # perf_analyzer exits 2 at the first level that does not settle; each one is kept and
    # the next level gets a new invocation, in every round.
    assert sweep.state == "succeeded", sweep.error
    commands = sweep.command.splitlines()
    assert len(commands) == 4 and all("perf_analyzer" in c for c in commands)
    assert [c.split("--concurrency-range ")[1].split()[0] for c in commands] == [
        "1:2:1",
        "2:2:1",
        "1:2:1",
        "2:2:1",
    ]
    levels = list(SweepPoint.objects.filter(sweep=sweep, window=-1).order_by("level"))
    assert [p.level for p in levels] == [1.0, 2.0]
    for level in levels:
        assert level.stable is False and level.throughput > 0 and level.p95_us
        assert [r["round"] for r in level.extra["rounds"]] == [1, 2]
        assert level.extra["throughput_spread"] is not None
    windows = SweepPoint.objects.filter(sweep=sweep, window__gte=0)
    assert sorted(set(windows.values_list("window", flat=True))) == [0, 1, 2, 3, 4, 5]
    # The CSV keeps them too, with what perf_analyzer printed (p95) and blanks for the rest.
    rows = list(csv.reader(io.StringIO(export.to_csv(sweep))))
    assert rows[0] == CSV_COLUMNS and [r[0] for r in rows[1:]] == ["1", "2"]
    assert all(r[11] and r[13] == "" for r in rows[1:])  # p95 latency known, Avg latency not
    summary = sweep.summary
    # Still an answer, read from what was measured and graded unsure.
    assert summary["recommendation"].startswith(
        "No level settled within 3 windows, so this is read from what was measured: "
    )
    assert summary["from_measured"] and summary["sureness"] == "unsure"
    assert summary["caveat"].startswith("Levels 1–2 did not settle within 3 windows")
    assert summary["knee_level"] in (1.0, 2.0) and summary["unstable_levels"] == [1.0, 2.0]


def test_the_builtin_engine_alternates_rounds_over_the_levels(add_batched, redis_db):
    sweep = _run(_params(rounds=2), "builtin")
    assert sweep.state == "succeeded", sweep.error
    # Window rows are created in measurement order: level 1, level 2, then again.
    order = list(
        SweepPoint.objects.filter(sweep=sweep, window__gte=0)
        .order_by("id")
        .values_list("level", "window")
    )
    assert order == [(1.0, w) for w in (0, 1, 2)] + [(2.0, w) for w in (0, 1, 2)] + [
        (1.0, w) for w in (3, 4, 5)
    ] + [(2.0, w) for w in (3, 4, 5)]
    for level in SweepPoint.objects.filter(sweep=sweep, window=-1):
        rounds = level.extra["rounds"]
        assert [r["round"] for r in rounds] == [1, 2] and level.extra["windows"] == 6
        values = sorted(r["throughput"] for r in rounds)
        assert level.throughput == pytest.approx(sum(values) / 2)  # the median of two
        assert level.stable is False
        # Each round's interval, spanned (3 windows a round: their range, 75% each).
        interval = level.extra["interval"]
        assert interval["settled_by"] is None and interval["windows"] == 6
        low, high = interval["throughput"]
        assert low <= min(values) and high >= max(values)
    assert "Levels 1–2 did not settle" in sweep.summary["caveat"]
    assert sweep.summary["from_measured"] and sweep.summary["sureness"] == "unsure"
