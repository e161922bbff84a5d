"""The per-step breakdown of ensembles and BLS models, without services: merging windows,
reading perf_analyzer's "Composing models:" blocks (captured from real runs), the CSV's step
columns and the verdict's sentence."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from profiler_app import measure, verdict
from profiler_app.engine import composing
from profiler_app.engine import perf_analyzer_command as pa_command
from profiler_app.engine import perf_analyzer_csv as pa_csv
from profiler_app.engine import perf_analyzer_output as pa_output
from profiler_app.engine.composing import Composing, Plan
from profiler_app.engine.merging import merge_server
from profiler_app.engine.results import ServerBreakdown
from profiler_app.params import SweepParams

DATA = Path(__file__).parent / "data" / "perf_analyzer"
ENSEMBLE = Plan(composing.ENSEMBLE, (Composing("add_sub", "1"), Composing("add_batched", "1")))
BLS = Plan(composing.BLS, (Composing("add_sub", "1"),), (Composing("add_sub"),))
STEP_COLUMNS = list(pa_csv.STEP_CSV_COLUMNS)


def _lines(name: str) -> list[str]:
    return (DATA / f"{name}.stdout.txt").read_text().splitlines()


def _breakdown(requests: int, executions: int, compute_us: float) -> ServerBreakdown:
    return ServerBreakdown(
        requests, requests, executions, 2 * compute_us, 10.0, 0.0, compute_us, 0.0
    )


def test_windows_merge_per_request_like_perf_analyzer() -> None:
    # Triton counts compute once per request: 100 requests at 300 µs in 50 batches and 100
    # at 200 µs one by one average 250 µs per request, whatever the batching.
    merged = merge_server([_breakdown(100, 50, 300.0), _breakdown(100, 100, 200.0)])
    assert merged is not None
    assert merged.compute_infer_us == pytest.approx(250.0)
    assert (merged.request_count, merged.execution_count) == (200, 150)


def test_the_ensemble_output_gives_each_step_in_step_order_and_their_sums() -> None:
    levels = pa_output.parse_output(_lines("ensemble"), ENSEMBLE)
    assert [lv.level for lv in levels] == [1, 2]
    for level in levels:
        row = level.measured("avg_us")
        steps = row.to_json()["extra"]["steps"]  # as stored
        # perf_analyzer prints them sorted by name; the row keeps the ensemble's order.
        assert [s["model"] for s in steps] == ["add_sub", "add_batched"]
        assert [s["version"] for s in steps] == ["1", "1"]
        assert list(steps[0]) == list(measure.STEP_FIELDS)
        assert all(s["request_count"] == row.requests for s in steps)  # 496, 602
        # perf_analyzer's rule: the ensemble's queue and compute are its steps' sums.
        assert row.queue_us == sum(s["queue_us"] for s in steps)
        for key in measure.COMPUTE_FIELDS:
            assert getattr(row, key) == sum(s[key] for s in steps)
        assert sum(s["compute_share"] for s in steps) == pytest.approx(1.0)
    first = levels[0].measured("avg_us")
    assert first.server_request_us == 1698 and first.queue_us == 767  # the Server line's
    add_batched = first.steps[1]
    assert (add_batched.queue_us, add_batched.compute_infer_us) == (708, 284)
    second = levels[1].measured("avg_us").steps[1]
    assert second.execution_count == 361
    assert second.avg_batch_size == pytest.approx(602 / 361)


def test_a_level_with_steps_is_reported_once_its_block_is_read() -> None:
    parser = pa_output.StdoutParser(ENSEMBLE)
    done: list[pa_output.PaLevel] = []
    for line in _lines("ensemble"):
        done += [e for e in parser.feed(line) if isinstance(e, pa_output.PaLevel)]
        if line.startswith("Request concurrency: 2"):
            # Level 1 ended at the next level, with both of its steps.
            assert [len(lv.steps) for lv in done] == [2]
    assert [len(lv.steps) for lv in done] == [2, 2]  # the closing summary ended level 2


def test_a_bls_models_own_breakdown_is_not_its_calls_sums() -> None:
    levels = pa_output.parse_output(_lines("bls"), BLS)
    row = levels[1].measured("avg_us")
    assert [s.model for s in row.steps] == ["add_sub"]
    assert row.steps[0].request_count == 589
    assert row.server_request_us == 2906
    # The Server line's queue and compute are add_sub's: bls_caller's own come from the CSV.
    assert row.queue_us is None and row.compute_infer_us is None
    own = pa_csv.csv_server(pa_csv.parse_csv((DATA / "bls.csv").read_text())[1])
    assert own == {
        "queue_us": 1155,
        "compute_input_us": 17,
        "compute_infer_us": 1371,
        "compute_output_us": 360,
    }


def test_the_command_names_a_bls_models_calls() -> None:
    params = SweepParams(model="bls_caller")
    command = pa_command.build_command(params, "h:1", bls_composing_models=["add_sub", "other:2"])
    assert "--bls-composing-models add_sub,other:2" in " ".join(command)
    assert "--bls-composing-models" not in pa_command.build_command(params, "h:1")


def test_declared_steps_and_calls_come_from_the_config() -> None:
    ensemble = {
        "name": "e",
        "platform": "ensemble",
        "ensemble_scheduling": {
            "step": [
                {"model_name": "add_sub", "model_version": "-1"},
                {"model_name": "add_batched", "model_version": "2"},
            ]
        },
    }
    assert composing.declared({"config": ensemble}) == (
        composing.ENSEMBLE,
        [Composing("add_sub"), Composing("add_batched", "2")],
    )
    bls = {
        "name": "b",
        "backend": "python",
        "parameters": {"calls_models": {"string_value": "a, b"}},
    }
    assert composing.declared(bls) == (composing.BLS, [Composing("a"), Composing("b")])
    assert composing.declared({"name": "plain", "backend": "python"}) == ("", [])


def test_a_call_outside_the_safe_names_is_refused_on_its_name() -> None:
    with pytest.raises(composing.StepError, match=r"calls_models .*'add;rm -rf'"):
        composing.check_names("bls_caller", [Composing("add;rm -rf")])
    composing.check_names("bls_caller", [Composing("add_sub")])


def _level(level: float, steps: list[dict] | None = None, **fields) -> measure.Level:
    row = measure.Level(level, throughput=100.0 * level, requests=10, avg_us=900.0, p95_us=1000.0)
    row.server_request_us = 800.0
    for key, value in fields.items():
        setattr(row, key, value)
    if steps is not None:
        row.steps = measure.steps_of({"extra": {"steps": steps}})
    return row


def _step(model: str, compute: float, requests: int = 10) -> dict:
    server = ServerBreakdown(requests, requests, requests // 2, 400.0, 50.0, 5.0, compute, 5.0)
    return measure.step_fields(model, "1", server)


def test_the_csv_adds_columns_per_step_after_perf_analyzers() -> None:
    levels = [
        _level(
            1, measure.with_compute_shares([_step("add_sub", 100.0), _step("add_batched", 300.0)])
        ),
        _level(2, measure.with_compute_shares([_step("add_sub", 90.0)])),
    ]
    rows = list(csv.reader(io.StringIO(pa_csv.levels_csv(levels))))
    step_header = [f"{m} {c}" for m in ("add_sub", "add_batched") for c in STEP_COLUMNS]
    assert rows[0] == [*pa_csv.CSV_COLUMNS, *step_header]
    first = dict(zip(rows[0], rows[1], strict=True))
    assert first["add_batched Server Compute Infer"] == "300"
    assert first["add_sub Server Queue"] == "50"
    assert (first["add_sub Request Count"], first["add_sub Avg Batch Size"]) == ("10", "2")
    second = dict(zip(rows[0], rows[2], strict=True))
    assert second["add_sub Server Compute Infer"] == "90"
    assert second["add_batched Server Compute Infer"] == ""  # a step the level lacks


def test_a_csv_without_steps_keeps_perf_analyzers_columns() -> None:
    header = next(csv.reader(io.StringIO(pa_csv.levels_csv([_level(1), _level(2)]))))
    assert header == pa_csv.CSV_COLUMNS


def test_step_names_never_reach_a_spreadsheet_as_formulas() -> None:
    levels = [_level(1, [_step('=HYPERLINK("x")', 10.0), _step("@SUM(1)", 10.0)])]
    header = next(csv.reader(io.StringIO(pa_csv.levels_csv(levels))))
    steps = header[len(pa_csv.CSV_COLUMNS) :]
    assert steps[0] == '\'=HYPERLINK("x") Server Queue'
    assert steps[len(STEP_COLUMNS)] == "'@SUM(1) Server Queue"
    assert not any(cell.startswith(("=", "+", "-", "@")) for cell in header)


PARAMS = SweepParams(model="ensemble_two_step", start=1, end=4, step=1)


def _row(level: float, tput: float, shares: dict[str, float] | None) -> dict:
    steps = [{"model": m, "version": "1", "compute_share": s} for m, s in (shares or {}).items()]
    return {
        "level": level, "throughput": tput, "requests": 100, "p95_us": 1000.0 * level,
        "stable": True, "extra": {"steps": steps} if shares is not None else {},
    }  # fmt: skip


def test_the_verdict_names_the_step_that_dominates_compute_at_the_knee() -> None:
    rows = [
        _row(1, 100, {"add_sub": 0.5, "add_batched": 0.5}),
        _row(2, 200, {"add_sub": 0.45, "add_batched": 0.55}),
        _row(3, 201, {"add_sub": 0.39, "add_batched": 0.61}),
        _row(4, 202, {"add_sub": 0.7, "add_batched": 0.3}),
    ]
    summary = verdict.summarize(rows, PARAMS, "succeeded")
    assert summary["knee_level"] == 2
    assert summary["recommendation"].endswith(" add_batched takes 55% of compute at concurrency 2.")


def test_without_a_knee_the_verdict_names_it_at_the_last_settled_level() -> None:
    rows = [_row(1, 100, {"add_sub": 0.2, "add_batched": 0.8}), _row(2, 200, {"add_sub": 0.7})]
    rows.append({**_row(3, 300, {"add_batched": 0.9}), "stable": False})
    sentence = verdict.summarize(rows, PARAMS, "succeeded")["recommendation"]
    assert sentence.endswith(" add_sub takes 70% of compute at concurrency 2.")


def test_a_sweep_without_steps_gets_no_step_sentence() -> None:
    rows = [_row(1, 100, None), _row(2, 200, None)]
    assert "of compute at" not in verdict.summarize(rows, PARAMS, "succeeded")["recommendation"]
