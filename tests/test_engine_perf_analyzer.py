"""perf_analyzer: command line, parsing its real output, CSV export, and a real run."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler_app.engine import perf_analyzer as pa
from profiler_app.engine import perf_analyzer_command as pa_command
from profiler_app.engine import perf_analyzer_csv as pa_csv
from profiler_app.engine import perf_analyzer_output as pa_output
from profiler_app.engine import stats
from profiler_app.engine.results import LevelResult, ServerBreakdown, SweepResult
from profiler_app.params import SweepParams

DATA = Path(__file__).parent / "data" / "perf_analyzer"


def _lines(name: str) -> list[str]:
    return (DATA / f"{name}.stdout.txt").read_text().splitlines() + (
        DATA / f"{name}.stderr.txt"
    ).read_text().splitlines()


def test_command_uses_perf_analyzers_flag_names() -> None:
    params = SweepParams(
        model="add_batched", version="1", start=1, end=8, step=2, batch_size=4,
        shapes={"INPUT0": [16]}, percentile=95, measurement_window_ms=500,
        stability_percentage=10, max_windows=6, latency_threshold_ms=5,
    )  # fmt: skip
    cmd = pa_command.build_command(
        params, "127.0.0.1:8001", binary="/x/perf_analyzer", csv_path="/t/r.csv"
    )
    assert cmd[:3] == ["/x/perf_analyzer", "-m", "add_batched"]
    joined = " ".join(cmd)
    for part in (
        "-x 1", "-i grpc", "-u 127.0.0.1:8001", "-b 4", "--concurrency-range 1:8:2",
        "--percentile=95", "--measurement-interval 500", "--stability-percentage 10",
        "--max-trials 6", "--latency-threshold 5", "--shape INPUT0:16",
        "--input-data random", "-f /t/r.csv --verbose-csv", "-v",
    ):  # fmt: skip
        assert part in joined


def test_request_rate_command_has_the_range_and_distribution() -> None:
    params = SweepParams(
        model="m",
        mode="request_rate",
        start=100,
        end=300,
        step=100,
        percentile="avg",
        arrival="poisson",
    )
    joined = " ".join(pa_command.build_command(params, "h:1", input_data_path="/d.json"))
    assert "--request-rate-range 100:300:100 --request-distribution poisson" in joined
    assert "--percentile" not in joined and "--input-data /d.json" in joined
    # The engine's limit on outstanding requests, said even at perf_analyzer's default.
    assert "--max-threads 4" in joined
    wider = pa_command.build_command(
        SweepParams(model="m", mode="request_rate", max_threads=16), "h:1"
    )
    assert "--max-threads 16" in " ".join(wider)
    concurrency = pa_command.build_command(SweepParams(model="m", max_threads=16), "h:1")
    assert "--max-threads" not in concurrency  # sync concurrency mode sizes its own threads


def test_stdout_of_a_concurrency_sweep_gives_every_level() -> None:
    levels = pa_output.parse_output(_lines("conc"))
    assert [lv.level for lv in levels] == [1, 2, 3]
    first = levels[0]
    assert first.throughput == pytest.approx(946.947)
    assert first.request_count == 1708
    assert first.percentiles_us == {50: 1033, 90: 1127, 95: 1186, 99: 1394}
    assert first.server["queue_us"] == 614 and first.server["compute_infer_us"] == 130
    assert first.server["Execution count"] == 1708
    assert all(lv.stable for lv in levels)


def test_verbose_stdout_streams_windows_before_their_level() -> None:
    parser = pa_output.StdoutParser()
    events = [e for line in _lines("verbose") for e in parser.feed(line)] + parser.close()
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["PaWindow"] * 3 + ["PaLevel"] + ["PaWindow"] * 3 + ["PaLevel"]
    window = events[0]
    assert isinstance(window, pa_output.PaWindow)
    assert (window.level, window.index, window.throughput, window.latency_us) == (
        1,
        0,
        909.328,
        1093,
    )
    level = events[3]
    assert (
        isinstance(level, pa_output.PaLevel)
        and level.avg_latency_us == 1084
        and len(level.windows) == 3
    )


def test_request_rate_levels_are_read() -> None:
    levels = pa_output.parse_output(_lines("rate"))
    assert [lv.level for lv in levels] == [200, 400]
    assert levels[1].throughput == pytest.approx(399.271)


def test_a_level_that_never_stabilises_is_marked_unstable() -> None:
    levels = pa_output.parse_output(_lines("unstable"))
    assert len(levels) == 1 and levels[0].level == 1 and not levels[0].stable


def test_the_level_over_the_latency_threshold_is_marked_and_ends_the_sweep() -> None:
    levels = pa_output.parse_output(_lines("threshold"))
    assert [lv.level for lv in levels] == [1, 3]
    assert levels[0].stable and not levels[0].over_threshold
    assert levels[1].over_threshold and len(levels[1].windows) == 3


def test_a_bad_model_error_is_collected() -> None:
    parser = pa_output.StdoutParser()
    for line in _lines("badmodel"):
        parser.feed(line)
    assert parser.errors and "nosuch" in parser.errors[0]


def test_csv_rows_are_resorted_by_concurrency() -> None:
    text = (DATA / "conc.csv").read_text()
    header = text.splitlines()[0].split(",")
    assert header == pa_csv.CSV_COLUMNS[:13]
    shuffled = "\n".join([text.splitlines()[0], *reversed(text.splitlines()[1:])])
    rows = pa_csv.parse_csv(shuffled)
    assert [r["Concurrency"] for r in rows] == [1, 2, 3]
    assert rows[0]["p95 latency"] == 1186


def test_verbose_csv_header_is_the_one_we_export() -> None:
    header = (DATA / "verbose.csv").read_text().splitlines()[0].split(",")
    assert header == pa_csv.CSV_COLUMNS


def _level(level: float, tput: float, p95: float) -> LevelResult:
    lat = stats.LatencySummary(100, p95 * 0.8, 10, p95 * 0.7, p95 * 0.9, p95, p95 * 1.2)
    server = ServerBreakdown(100, 100, 50, p95 * 0.5, 300, 10, 100, 20)
    return LevelResult(level, [], True, tput, lat, server, 0.01, 0.02, 0, 50.0)


def test_export_csv_sorts_by_level_with_perf_analyzers_columns() -> None:
    result = SweepResult(SweepParams(model="m"), [_level(2, 1800, 1400), _level(1, 950, 1200)])
    lines = pa_csv.levels_csv(
        [lv.measured() for lv in result.levels], result.params.mode
    ).splitlines()
    assert lines[0] == ",".join(pa_csv.CSV_COLUMNS)
    assert [line.split(",")[0] for line in lines[1:]] == ["1", "2"]
    assert lines[1].split(",")[11] == "1200"
    assert (
        pa_csv.parse_csv(
            pa_csv.levels_csv([lv.measured() for lv in result.levels], result.params.mode)
        )[0]["Inferences/Second"]
        == 950
    )


def test_locate_prefers_the_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "perf_analyzer"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PERF_ANALYZER", str(fake))
    assert pa_command.locate_perf_analyzer() == fake
    monkeypatch.setenv("PERF_ANALYZER", str(tmp_path / "missing"))
    with pytest.raises(pa_command.PerfAnalyzerNotFound):
        pa_command.locate_perf_analyzer()


async def test_a_run_that_dies_before_any_level_says_why_from_its_stderr(tmp_path: Path) -> None:
    # What the real binary prints when libb64 is missing, then more lines than are kept.
    fake = tmp_path / "perf_analyzer"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'starting' \n"
        'for i in 1 2 3 4; do echo "noise $i" >&2; done\n'
        "echo 'perf_analyzer: error while loading shared libraries: libb64.so.0d: "
        "cannot open shared object file' >&2\n"
        "exit 127\n"
    )
    fake.chmod(0o755)
    result = await pa.run_perf_analyzer(SweepParams(model="m"), "h:1", binary=fake)
    assert result.returncode == 127 and not result.ok
    assert len(result.errors) == pa.STDERR_TAIL
    assert result.errors[-1].startswith("perf_analyzer: error while loading shared libraries")
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 3\n")
    silent.chmod(0o755)
    quiet = await pa.run_perf_analyzer(SweepParams(model="m"), "h:1", binary=silent)
    assert quiet.errors == ["perf_analyzer exited with 3"]


@pytest.mark.integration
async def test_the_real_perf_analyzer_runs_a_short_sweep(triton) -> None:
    from triton_api.client import TritonClient

    TritonClient(triton.grpc_url, triton.metrics_url).load("add_batched")
    params = SweepParams(
        model="add_batched",
        start=1,
        end=2,
        measurement_window_ms=500,
        # Loose on purpose (max/min of 3 windows within 11x): this checks running and
        # parsing, and perf_analyzer exits 2 when a level never settles, which a busy two-core
        # CI machine can cause at 50% (and, more rarely, with another test lane beside it).
        stability_percentage=1000,
        max_windows=10,
    )
    windows: list[pa_output.PaWindow] = []
    levels: list[pa_output.PaLevel] = []
    result = await pa.run_perf_analyzer(
        params, triton.grpc_url, on_window=windows.append, on_level=levels.append
    )
    assert result.returncode == 0, result.errors
    assert [r["Concurrency"] for r in result.csv_rows] == [1, 2]
    assert [lv.level for lv in levels] == [1, 2]
    assert len(windows) >= 6 and all(w.throughput > 0 for w in windows)
    assert result.cpu_seconds > 0


@pytest.mark.integration
async def test_the_real_perf_analyzer_takes_json_input_data(triton) -> None:
    from triton_api.client import TritonClient

    TritonClient(triton.grpc_url, triton.metrics_url).load("add_batched")
    document = {"data": [{"INPUT0": [float(i)] * 16} for i in range(3)]}
    params = SweepParams(
        model="add_batched", measurement_window_ms=300, stability_percentage=1000,
        max_windows=5, input_data=document,
    )  # fmt: skip
    result = await pa.run_perf_analyzer(params, triton.grpc_url)
    assert result.returncode == 0, result.errors
    assert "--input-data" in result.command and result.levels[0].throughput > 0
    # A document that does not fit the model is perf_analyzer's error, reported.
    wrong = SweepParams(**{**params.__dict__, "input_data": {"data": [{"INPUT0": [1.0] * 3}]}})
    failed = await pa.run_perf_analyzer(wrong, triton.grpc_url)
    assert not failed.ok and failed.errors
