"""The built-in engine's streaming mode against a real Triton and the decoupled demo model:
protocol and shape (every response counted, a stream that never finishes counted as an
error), never speed."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiler_app import measure
from profiler_app.engine.loadgen import run_sweep
from profiler_app.params import SweepParams
from triton_api.client import TritonClient

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[1] / "examples" / "model_repository" / "stream_tok"


def response_count(config: str) -> int:
    """RESPONSE_COUNT from the model's config: the truth the counts are checked against."""
    found = re.search(r'key: "RESPONSE_COUNT" value: \{ string_value: "(\d+)" \}', config)
    assert found
    return int(found.group(1))


COUNT = response_count((DEMO / "config.pbtxt").read_text())


def _delay_ms(config: str, key: str) -> float:
    found = re.search(rf'key: "{key}" value: \{{ string_value: "(\d+)" \}}', config)
    assert found
    return float(found.group(1))


FIRST_MS = _delay_ms((DEMO / "config.pbtxt").read_text(), "FIRST_RESPONSE_DELAY_MS")
NEXT_MS = _delay_ms((DEMO / "config.pbtxt").read_text(), "RESPONSE_DELAY_MS")


@pytest.fixture(scope="module")
def control(triton) -> TritonClient:
    return TritonClient(triton.grpc_url, triton.metrics_url)


@pytest.fixture(scope="module")
def stream_tok(triton, control: TritonClient) -> Iterator[str]:
    control.load("stream_tok")
    yield triton.grpc_url
    control.unload("stream_tok")


@pytest.fixture()
def stuck_model(triton, control: TritonClient) -> Iterator[str]:
    """A test-only copy of stream_tok (in the test session's repository) whose every 3rd
    request never gets its final response."""
    folder = triton.repository / "stream_tok_stuck"
    shutil.copytree(DEMO, folder)
    config = (DEMO / "config.pbtxt").read_text().replace('name: "stream_tok"', "")
    config = config.replace(
        "parameters [",
        'parameters [\n  { key: "WITHHOLD_FINAL_EVERY" value: { string_value: "3" } },',
    )
    (folder / "config.pbtxt").write_text('name: "stream_tok_stuck"\n' + config)
    control.load("stream_tok_stuck")
    yield "stream_tok_stuck"
    control.unload("stream_tok_stuck")
    shutil.rmtree(folder)


def _params(model: str = "stream_tok", **overrides) -> SweepParams:
    base = dict(
        model=model,
        streaming=True,
        start=1,
        end=2,
        measurement_window_ms=300,
        stability_percentage=100,
        max_windows=4,
    )
    return SweepParams(**{**base, **overrides})


async def test_a_streaming_sweep_counts_every_response_of_every_request(stream_tok: str) -> None:
    windows = []
    # An objective no request can meet (a first response within 1 µs): goodput counts none.
    result = await run_sweep(
        _params(goodput="first_response:0.001"), stream_tok, on_window=windows.append
    )
    assert [lv.level for lv in result.levels] == [1, 2]
    for level in result.levels:
        m = level.measured()
        assert m.errors == 0 and m.requests > 0
        extra = m.to_json()["extra"]
        assert extra["responses_per_request"] == COUNT
        assert extra["empty_final_responses"] == m.requests  # one empty final flag each
        # Responses per second over requests per second: a count ratio over one duration.
        assert extra["response_throughput"] == pytest.approx(COUNT * m.throughput, rel=0.01)
        for name in ("first_response", "inter_response"):
            figures = [extra[f"{name}_{k}"] for k in ("avg_us", "p50_us", "p95_us", "p99_us")]
            assert all(v is not None and v > 0 for v in figures), (name, extra)
            assert extra[f"{name}_p50_us"] <= extra[f"{name}_p95_us"] <= extra[f"{name}_p99_us"]
        # The request latency is the time to the final response: after the first one.
        assert m.p50_us is not None and m.p50_us > extra["first_response_p50_us"]
        assert extra["goodput"] == 0 and extra["good_share"] == 0
        # One response is one token by default.
        assert extra["tokens_per_request"] == COUNT
    for window in windows:
        if window.requests:
            assert window.measured().to_json()["extra"]["responses_per_request"] == COUNT


async def test_a_request_rate_over_streams_counts_tokens_goodput_and_every_gap(
    stream_tok: str,
) -> None:
    windows = []
    params = _params(
        mode="request_rate", start=20, end=20, max_windows=3, token_output="TOKEN",
        # Generous: every completed request is within the 1 s stream timeout.
        goodput="time_to_first_token:60000 inter_token_latency:60000 request_latency:60000",
    )  # fmt: skip
    result = await run_sweep(params, stream_tok, on_window=windows.append)
    (level,) = result.levels
    m = level.measured()
    assert m.errors == 0 and m.requests > 0
    assert "behind_schedule" in m.extra
    assert m.figure("responses_per_request") == COUNT
    # TOKEN holds one element per response: its tokens are the responses.
    assert m.figure("tokens_per_request") == COUNT
    assert m.figure("output_token_throughput") == m.figure("response_throughput")
    assert m.figure("output_token_throughput_per_user") > 0
    assert m.figure("good_share") == 1
    assert m.figure("goodput") == pytest.approx(m.throughput)
    assert len(windows) == len(level.windows)
    for window in windows:
        extra = window.measured().to_json()["extra"]
        assert window.errors == 0
        histogram = extra[measure.INTER_RESPONSE_HISTOGRAM]
        assert len(histogram) == len(measure.INTER_RESPONSE_EDGES_US) + 1
        # Every completed request had COUNT responses: COUNT - 1 gaps each, all binned.
        assert sum(histogram) == window.requests * (COUNT - 1)
        if window.requests:
            assert extra["good_share"] == 1


async def test_a_request_rate_over_streams_keeps_at_most_max_threads_outstanding(
    stream_tok: str,
) -> None:
    # Each request takes at least the model's sleeps (FIRST_RESPONSE_DELAY_MS + (COUNT - 1)
    # x RESPONSE_DELAY_MS): one outstanding at a time cannot send 100/s.
    params = _params(mode="request_rate", start=100, end=100, max_windows=3, max_threads=1)
    result = await run_sweep(params, stream_tok)
    (level,) = result.levels
    m = level.measured()
    assert m.errors == 0 and m.requests > 0 and m.figure("responses_per_request") == COUNT
    assert level.behind_schedule
    floor_s = (FIRST_MS + (COUNT - 1) * NEXT_MS) / 1000
    for window in level.windows:
        sent = round(window.send_rate * window.duration_s)
        assert sent <= window.duration_s / floor_s + 1, (sent, window.duration_s)


async def test_a_stream_that_never_finishes_is_an_error_and_the_sweep_goes_on(
    stuck_model: str, triton
) -> None:
    # Room for the 1 s timeout on a slow machine: the level cannot settle before it fires
    # (no request finishes while the stuck one is outstanding at concurrency 1).
    params = _params(stuck_model, max_windows=40)
    result = await run_sweep(params, triton.grpc_url)
    assert [lv.level for lv in result.levels] == [1, 2]
    assert sum(lv.errors for lv in result.levels) >= 1
    messages = [m for lv in result.levels for w in lv.windows for m in w.error_messages]
    assert any("no final response within" in m for m in messages), messages
    for level in result.levels:
        m = level.measured()
        assert m.requests > 0 and m.figure("responses_per_request") == COUNT
