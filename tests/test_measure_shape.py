"""One shape of a measured level and a window: both engines convert to it, a stored row,
a search's level and the API schema share its fields; one scoring rule, one Spread, and
one Pareto front, computed on the server and drawn by the page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from profiler_app import measure, repeats, sweep_recorder, verdict
from profiler_app.engine import perf_analyzer_output as pa_output
from profiler_app.engine import stats
from profiler_app.engine.results import LevelResult, ServerBreakdown, WindowResult
from profiler_app.level_figures import (
    GoodputFigures,
    GpuFigures,
    SequenceFigures,
    StepFigures,
    StreamFigures,
    TraceFigures,
)
from profiler_app.measure_api import SearchLevelSerializer, SweepPointSerializer
from profiler_app.models import Search, SearchCandidate, Sweep, SweepPoint
from profiler_app.params import SweepParams
from profiler_app.search import confirm, defaults, objective, reading, report, scoring
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Knobs, Space
from triton_api.gpus import GpuSample

ROOT = Path(__file__).resolve().parents[1]
LEVEL_FIELDS = list(measure.COLUMNS)


def _builtin_window() -> WindowResult:
    lat = stats.summarize_latencies([900_000, 1_000_000, 1_100_000])
    server = ServerBreakdown(3, 3, 2, 800.0, 50.0, 10.0, 700.0, 20.0)
    return WindowResult(
        2, 0, 1.0, 3, 3, 3.0, lat, 0, [], server, 40.0, 3.0, closed_at=1234.5,
        latencies_ns=np.array([900_000, 1_000_000, 1_100_000]),
    )  # fmt: skip


def _builtin_level() -> LevelResult:
    w = _builtin_window()
    return LevelResult(2, [w], True, 3.0, w.latency, w.server, 0.01, 0.02, 0, 40.0)


def _pa_level() -> pa_output.PaLevel:
    return pa_output.PaLevel(
        2, throughput=3.0, request_count=3, avg_latency_us=1000, percentiles_us={95: 1100},
        server={"request_us": 800, "queue_us": 50}, windows=[pa_output.PaWindow(2, 0, 3.0, 1100)],
    )  # fmt: skip


def test_both_engines_give_one_shape_named_as_the_stored_columns() -> None:
    ours = _builtin_level().measured().to_json()
    theirs = _pa_level().measured("p95_us").to_json()
    columns = {f.name for f in SweepPoint._meta.get_fields()} - {"id", "sweep", "recorded_at"}
    assert list(ours) == list(theirs) == LEVEL_FIELDS
    assert set(LEVEL_FIELDS) | {"window"} == columns
    assert ours["p95_us"] == 1100.0 and theirs["p95_us"] == 1100
    assert ours["server_request_us"] == theirs["server_request_us"] == 800
    assert ours["extra"]["windows"] == theirs["extra"]["windows"] == 1


def test_both_engines_windows_carry_their_number_and_closed_at() -> None:
    ours = _builtin_window().measured().to_json()
    theirs = pa_output.PaWindow(2, 0, 3.0, 1100, closed_at=99.0).measured("p95_us").to_json()
    assert list(ours) == list(theirs) == [*LEVEL_FIELDS, "window", "closed_at"]
    assert ours["closed_at"] == 1234.5 and theirs["closed_at"] == 99.0
    assert theirs["p95_us"] == 1100 and theirs["avg_us"] is None


def test_perf_analyzer_stamps_each_window_line_as_it_reads_it() -> None:
    parser = pa_output.StdoutParser()
    parser.feed("Request concurrency: 1")
    (window,) = parser.feed("  Pass [1] throughput: 10.5 infer/sec. p95 latency: 1200 usec")
    assert isinstance(window, pa_output.PaWindow) and window.closed_at > 0


@pytest.mark.django_db
@pytest.mark.parametrize("engine", ["builtin", "perf_analyzer"])
def test_both_engines_window_events_have_the_same_fields(engine: str, monkeypatch) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        sweep_recorder.events, "publish", lambda g, kind, data: sent.append((kind, data))
    )
    sweep = Sweep.objects.create(model="m", server="x", params={"model": "m"})
    recorder = sweep_recorder.Recorder(sweep, SweepParams(model="m"))
    if engine == "builtin":
        recorder.window(_builtin_window())
    else:
        recorder.pa_window(pa_output.PaWindow(2, 0, 3.0, 1100, closed_at=1234.5))
    recorder.close()
    ((kind, data),) = sent
    assert kind == "sweep.window" and data["closed_at"] == 1234.5
    assert set(data["point"]) == {*LEVEL_FIELDS, "window", "closed_at"}
    assert data["point"]["closed_at"] == 1234.5 and data["point"]["extra"]["round"] == 1


def full_level() -> measure.Level:
    """A level with every sub-record, and two free-form entries."""
    return measure.Level(
        2, 3.0, requests=3, p95_us=1100.0, stable=True,
        extra={"windows": 3, "client_cpu_us": 40.0},
        gpu=GpuFigures(0.5, 2.0**30),
        stream=StreamFigures(response_throughput=6.0, first_response_p95_us=300.0),
        sequence=SequenceFigures(first_requests=3, sequences_completed=1, sequences_failed=0),
        goodput=GoodputFigures(2.0, 2 / 3),
        trace=TraceFigures(3, 100.0, 10.0, 5.0, 80.0, 3.0, 2.0),
        steps=(StepFigures("add_sub", "1", 3, 3, 2, 1.5, 800.0, 50.0, 10.0, 700.0, 20.0, 1.0),),
        interval=measure.LevelInterval(2.9, 3.1, (1000.0, 1200.0), 9, 0.95, "interval"),
    )  # fmt: skip


def test_a_levels_sub_records_are_stored_flat_under_the_keys_rows_always_had() -> None:
    level = full_level()
    extra = level.to_json()["extra"]
    assert set(extra) == {
        "windows", "client_cpu_us", "gpu_utilization", "gpu_memory_bytes", "steps", "interval",
        *measure.STREAM_FIELDS, *measure.SEQUENCE_FIELDS, *measure.GOODPUT_FIELDS,
        *TraceFigures.names(),
    }  # fmt: skip
    assert extra["response_throughput"] == 6.0 and extra["first_response_p99_us"] is None
    assert extra["first_requests"] == 3 and extra["goodput"] == 2.0
    assert extra["gpu_memory_bytes"] == 2**30
    assert list(extra["steps"][0]) == list(measure.STEP_FIELDS)
    assert extra["steps"][0]["compute_infer_us"] == 700.0
    assert extra["interval"] == {"throughput": [2.9, 3.1], "latency": [1000.0, 1200.0],
                                 "windows": 9, "confidence": 0.95, "settled_by": "interval"}  # fmt: skip
    # Read back (a search's level, a stored row): the same typed level, free-form apart.
    for back in (
        measure.Level.from_json(level.to_json()),
        measure.Level.from_point(SweepPoint(level=2, window=-1, **level.columns())),
    ):
        assert back == level and back.extra == {"windows": 3, "client_cpu_us": 40.0}
        assert back.stream is not None and back.stream.first_response_p95_us == 300.0
        assert back.figure("first_response_p95_us") == 300.0 and back.figure("goodput") == 2.0
        assert measure.interval_of(back) == level.interval
        assert back.to_json() == level.to_json()


def test_rows_stored_with_some_entries_keep_exactly_those() -> None:
    # perf_analyzer's streaming level (its response throughput only), a built-in streaming
    # level stored before tokens were counted, steps without compute shares, and entries
    # no record reads (left free-form as they were).
    rows = [
        {"response_throughput": 20.0, "windows": 3, "engine": "perf_analyzer"},
        {name: 1.0 for name in measure.STREAM_FIELDS if name not in measure.TOKEN_FIELDS},
        {"steps": [{"model": "a", "version": "1", "queue_us": 5.0}]},
        {"steps": "x", "interval": {"throughput": "x"}, "goodput": 1.5},
    ]
    for extra in rows:
        level = measure.Level.from_json({"level": 1, "throughput": 10.0, "extra": extra})
        assert level.to_json()["extra"] == extra
        assert level.figure("output_token_throughput") is None
    pa, before_tokens, steps, odd = (
        measure.Level.from_json({"level": 1, "extra": e}) for e in rows
    )
    assert pa.stream == StreamFigures(response_throughput=20.0)
    assert pa.extra == {"windows": 3, "engine": "perf_analyzer"}
    assert before_tokens.figure("inter_response_p95_us") == 1.0
    assert steps.steps == (StepFigures("a", "1", queue_us=5.0),) and steps.extra == {}
    assert odd.steps == () and odd.interval is None and odd.extra["steps"] == "x"
    assert odd.goodput == GoodputFigures(1.5) and odd.figure("goodput") == 1.5


def test_both_engines_build_the_typed_sub_records() -> None:
    window = _builtin_window()
    window.gpu, window.good = GpuSample(0.25, 1024.0), 3
    ours = window.measured()
    assert ours.gpu == GpuFigures(0.25, 1024.0) and ours.goodput == GoodputFigures(3.0, 1.0)
    assert not set(ours.extra) & {*GpuFigures.names(), *GoodputFigures.names()}
    theirs = pa_output.PaLevel(2, throughput=3.0, request_count=3, response_throughput=6.0)
    measured = theirs.measured("p95_us")
    assert measured.stream == StreamFigures(response_throughput=6.0)
    assert "response_throughput" not in measured.extra
    stream_keys = set(measured.to_json()["extra"]) & set(measure.STREAM_FIELDS)
    assert stream_keys == {"response_throughput"}  # perf_analyzer measures no other


def test_old_search_rows_that_say_concurrency_still_read() -> None:
    old = {"concurrency": 4, "throughput": 900.0, "p95_us": 1500.0, "stable": True,
           "windows": 3, "over_threshold": False, "avg_batch": 2.0}  # fmt: skip
    level = measure.Level.from_json(old)
    assert level.level == 4 and level.p95_us == 1500.0
    assert level.extra == {"windows": 3, "over_threshold": False, "avg_batch": 2.0}
    new = measure.search_json(level)
    assert new["level"] == new["concurrency"] == 4 and new["windows"] == 3
    assert measure.Level.from_json(new) == level
    assert defaults.auto_budget([old], "p95_us") == (3.0, 4)


def test_a_search_level_is_the_one_shape_with_its_older_names() -> None:
    row = scoring.level_json(_builtin_level())
    assert list(row)[: len(LEVEL_FIELDS)] == LEVEL_FIELDS
    assert row["concurrency"] == row["level"] == 2 and row["windows"] == 1
    assert row["avg_batch"] == 1.5 and row["over_threshold"] is False


def test_the_api_schema_lists_the_same_fields() -> None:
    assert list(SweepPointSerializer().fields) == [*LEVEL_FIELDS, "window"]
    assert list(SearchLevelSerializer().fields)[: len(LEVEL_FIELDS)] == LEVEL_FIELDS


def test_the_verdicts_best_level_is_the_searchs_score() -> None:
    # Two levels at the same throughput within the budget: the score takes the lower latency
    # (the old copy of the rule took the first).
    points = [
        {"level": 1, "throughput": 1000.0, "p95_us": 1500.0, "stable": True, "requests": 9},
        {"level": 2, "throughput": 1000.0, "p95_us": 1200.0, "stable": True, "requests": 9},
    ]
    params = SweepParams(model="m", start=1, end=2, latency_threshold_ms=2.0)
    assert verdict.summarize(points, params, "succeeded")["best_level"] == 2
    curve = [stats.CurvePoint(1, 1000, 1500), stats.CurvePoint(2, 1000, 1200)]
    found = objective.score(curve, objective.Constraints(latency_budget_ms=2.0), "max_throughput")
    assert found is not None and found.feasible and found.level == curve[1]


def test_a_re_measured_objective_has_the_sweeps_spread_type() -> None:
    rounds = [
        {"round": n, "levels": [{"concurrency": 4, "throughput": t, "p95_us": 900.0}]}
        for n, t in enumerate([1000.0, 1100.0, 1050.0], start=1)
    ]
    search = Search(
        constraints=Constraints(latency_budget_ms=5).to_json(), objective="max_throughput"
    )
    spread = confirm.objective_spread(rounds, lambda levels: scoring.score_levels(levels, search))
    assert isinstance(spread, repeats.Spread)
    assert spread.median == 1050 and spread.rounds == 3
    assert spread.to_json()["text"] == "1,050.0 ± 5%"


BASE = Knobs(1, "KIND_CPU", 32, True, 200)
TWO = Knobs(2, "KIND_CPU", 32, True, 200)


@pytest.mark.django_db
def test_the_pareto_front_is_the_servers_and_the_page_draws_it() -> None:
    carrier = Sweep.objects.create(
        kind="search", model="busy_compute", server="x", state="succeeded",
        finished_at=timezone.now(), params={"model": "busy_compute", "start": 2, "end": 4},
    )  # fmt: skip
    search = Search.objects.create(
        sweep=carrier, model="busy_compute", mode="grid", space=Space(counts=(1, 2)).to_json(),
        constraints=Constraints(latency_budget_ms=5).to_json(), baseline=BASE.to_json(),
    )  # fmt: skip
    # An old row (concurrency only) and a new one (the one shape): both are on the plane.
    old = [{"concurrency": 2, "throughput": 500.0, "p95_us": 1000.0},
           {"concurrency": 4, "throughput": 600.0, "p95_us": 3000.0}]  # fmt: skip
    new = [measure.search_json(measure.Level(4, 900.0, p95_us=2000.0, stable=True))]
    for seq, (knobs, levels) in enumerate([(BASE, old), (TWO, new)], start=1):
        SearchCandidate.objects.create(
            search=search, key=knobs.key, seq=seq, knobs=knobs.to_json(),
            baseline=knobs == BASE, state="measured", levels=levels,
        )  # fmt: skip
    snapshot = reading.snapshot(search.pk)
    assert snapshot is not None
    result = snapshot["result"]  # what the page reads (the search.result event and resync)
    assert result["front"] == [[BASE.key, 2], [TWO.key, 4]]  # (600 @ 3 ms is dominated)
    assert [(p["key"], p["concurrency"], p["throughput"], p["latency_us"], p["seq"])
            for p in result["front_points"]] == [
        (BASE.key, 2, 500.0, 1000.0, 1), (TWO.key, 4, 900.0, 2000.0, 2)
    ]  # fmt: skip
    trace = next(
        t for t in report.figures(snapshot)["pareto"]["data"] if t["name"] == "Pareto front"
    )
    assert trace["x"] == [1.0, 2.0] and trace["y"] == [500.0, 900.0]
    js = (ROOT / "static/js/search.js").read_text()
    assert "result.front_points" in js and ".sort(" not in js  # drawn, not computed
