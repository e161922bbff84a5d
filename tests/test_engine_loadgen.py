"""The built-in load generator against a real Triton."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest

from profiler_app.engine.loadgen import run_sweep
from profiler_app.engine.merging import _behind
from profiler_app.engine.results import WindowResult
from profiler_app.engine.worker_requests import Schedule
from profiler_app.params import SweepError, SweepParams
from triton_api.client import TritonClient

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def triton_url(triton) -> str:
    from triton_api.client import TritonClient

    TritonClient(triton.grpc_url, triton.metrics_url).load("add_batched")
    return triton.grpc_url


def _quick(**overrides) -> SweepParams:
    base = dict(
        model="add_batched", measurement_window_ms=500, stability_percentage=50, max_windows=5
    )
    return SweepParams(**{**base, **overrides})


async def test_a_short_concurrency_sweep_gives_sane_numbers(triton_url: str) -> None:
    windows: list[WindowResult] = []
    levels = []
    result = await run_sweep(
        _quick(start=1, end=3), triton_url, on_window=windows.append, on_level=levels.append
    )
    assert [lv.level for lv in result.levels] == [1, 2, 3] == [lv.level for lv in levels]
    for level in result.levels:
        # Shape, not speed (speed is make bench's): how fast depends on the machine.
        assert level.errors == 0 and level.throughput > 0
        assert level.latency is not None and level.latency.p95_us > 0
        assert level.latency.p50_us <= level.latency.p95_us <= level.latency.p99_us
        assert level.server is not None and level.server.queue_us > 0
        assert 1 <= level.server.avg_batch_size <= level.level + 0.01
        assert level.client_cpu_us > 0
        assert 3 <= len(level.windows) <= 5
    assert len(windows) == sum(len(lv.windows) for lv in result.levels)
    assert "infer/s" in result.recommendation()


async def test_batch_size_counts_inferences_like_perf_analyzer(triton_url: str) -> None:
    # A request-latency objective over the 30 s request timeout: every request meets it.
    params = _quick(start=1, end=1, batch_size=4, client="aio", goodput="request_latency:60000")
    result = await run_sweep(params, triton_url)
    level = result.levels[0]
    window = level.windows[-1]
    assert window.inferences == 4 * window.requests
    assert (
        level.server is not None and level.server.inference_count == 4 * level.server.request_count
    )
    # Goodput counts requests (AIPerf's), throughput inferences: a batch of 4 apart.
    extra = level.measured().to_json()["extra"]
    assert extra["good_share"] == 1 and extra["goodput"] * 4 == pytest.approx(level.throughput)
    assert window.measured().to_json()["extra"]["good_share"] == 1


@pytest.mark.parametrize(
    "client,workers,arrival,max_threads",
    [
        ("auto", 1, "poisson", 4),
        ("threads", 2, "constant", 4),
        ("aio", 1, "constant", 4),
        # 6 threads over 4 processes (2, 2, 1, 1): each carries its share of the rate.
        ("auto", 1, "constant", 6),
    ],
)
async def test_request_rate_mode_hits_its_rate(
    triton_url: str, client: str, workers: int, arrival: str, max_threads: int
) -> None:
    params = _quick(mode="request_rate", start=150, end=300, step=150, arrival=arrival)
    result = await run_sweep(
        dataclasses.replace(params, client=client, workers=workers, max_threads=max_threads),
        triton_url,
    )
    low, high = (0.75, 1.25) if arrival == "poisson" else (0.85, 1.15)
    for level in result.levels:
        assert level.errors == 0
        # Never over the schedule, and never silently under it: on a machine too busy to send
        # the rate (other processes take the cores) the level says it fell behind, the
        # honest outcome; otherwise it sent its rate.
        assert level.send_rate < high * level.level, level.level
        assert level.behind_schedule or level.send_rate > low * level.level, level.level
        # Replies can lag on a busy machine; they never outnumber what the schedule sent.
        assert 0 < level.throughput < high * level.level, level.level


@pytest.mark.parametrize(
    "arrival,sent_per_s,behind",
    [
        ("constant", 96.0, False),
        ("constant", 94.0, True),
        ("poisson", 85.0, False),  # 255 of 300 expected: under 95 %, within 3 sigma (52)
        ("poisson", 80.0, True),  # 240: beyond 3 sigma too
        ("poisson", 99.0, False),
    ],
)
def test_behind_schedule_allows_for_poisson_noise(
    arrival: str, sent_per_s: float, behind: bool
) -> None:
    params = _quick(mode="request_rate", start=100, end=100, arrival=arrival)
    assert _behind(100.0, sent_per_s, 3.0, params) is behind


async def test_a_rate_the_threads_cannot_keep_is_marked_behind_schedule(triton_url: str) -> None:
    # 4 threads (perf_analyzer's default) waiting ~1 ms per reply cannot send 50,000
    # requests/s: the level says so.
    params = _quick(mode="request_rate", start=50_000, end=50_000, client="threads")
    result = await run_sweep(params, triton_url)
    level = result.levels[0]
    assert level.behind_schedule
    assert 0 < level.send_rate < 0.95 * 50_000


async def test_max_threads_bounds_the_requests_outstanding(triton_url: str) -> None:
    # add_batched batches whatever waits in its queue. With one thread there is never more
    # than one request outstanding, so every execution is a batch of one; with 16 threads
    # at a rate one thread cannot keep, requests overlap and batches form.
    base = _quick(mode="request_rate", start=20_000, end=20_000, max_windows=3)
    one = (await run_sweep(dataclasses.replace(base, max_threads=1), triton_url)).levels[0]
    many = (await run_sweep(dataclasses.replace(base, max_threads=16), triton_url)).levels[0]
    assert one.behind_schedule and one.server is not None
    assert one.server.avg_batch_size == pytest.approx(1.0)
    assert many.server is not None and many.server.avg_batch_size > 1.0


def test_max_threads_out_of_range_is_refused() -> None:
    for bad in (0, 65):
        with pytest.raises(SweepError, match="max threads must be between 1 and 64"):
            _quick(mode="request_rate", start=10, end=10, max_threads=bad).validate()


def test_schedule_hands_out_each_send_time_once_at_the_rate() -> None:
    first = 1_000_000_000
    constant = Schedule(200.0, "constant", 0, first)
    assert [constant.take() for _ in range(3)] == [first, first + 5_000_000, first + 10_000_000]

    poisson = Schedule(1000.0, "poisson", 7, first)
    taken: list[int] = []

    def take_many() -> None:
        taken.extend(poisson.take() for _ in range(2000))

    threads = [threading.Thread(target=take_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(taken)) == 8000  # no send time handed to two threads
    mean_gap_s = (max(taken) - first) / 7999 / 1e9
    assert 0.0009 < mean_gap_s < 0.0011
    again = Schedule(1000.0, "poisson", 7, first)  # seeded: the same stream again
    assert [again.take() for _ in range(5)] == sorted(taken)[:5]


async def test_cancel_stops_within_one_window_and_keeps_finished_windows(triton_url: str) -> None:
    windows: list[WindowResult] = []
    cancel_at: list[float] = []

    def on_window(window: WindowResult) -> None:
        windows.append(window)
        if len(windows) == 2:
            cancel_at.append(time.monotonic())

    result = await run_sweep(
        _quick(start=1, end=4, stability_percentage=0.001, max_windows=10),
        triton_url,
        on_window=on_window,
        should_cancel=lambda: bool(cancel_at),
    )
    assert result.cancelled and result.stopped_reason == "cancelled"
    assert len(result.levels) == 1 and result.levels[0].cancelled
    # No third window was measured: it stopped within the window after the request.
    assert len(result.levels[0].windows) == 2


async def test_cancel_is_seen_when_closing_a_window_took_longer_than_a_window(
    triton_url: str,
) -> None:
    windows: list[WindowResult] = []
    cancel = False

    def slow_on_window(window: WindowResult) -> None:
        nonlocal cancel
        windows.append(window)
        if len(windows) == 2:
            cancel = True
            time.sleep(0.6)  # a busy machine: the next window's deadline passes meanwhile

    result = await run_sweep(
        _quick(start=1, end=2, stability_percentage=0.001, max_windows=10,
               measurement_window_ms=200),
        triton_url, on_window=slow_on_window, should_cancel=lambda: cancel,
    )  # fmt: skip
    assert result.cancelled and len(result.levels[0].windows) == 2


async def test_cancel_before_the_first_window_closes_keeps_an_empty_level(triton_url: str) -> None:
    result = await run_sweep(_quick(start=1, end=2), triton_url, should_cancel=lambda: True)
    assert result.cancelled
    assert all(level.latency is None for level in result.levels)


async def test_latency_threshold_stops_raising_the_load(triton_url: str) -> None:
    result = await run_sweep(_quick(start=1, end=8, latency_threshold_ms=0.1), triton_url)
    assert [lv.level for lv in result.levels] == [1]
    assert result.levels[0].over_threshold and result.stopped_reason == "latency threshold"


async def test_an_unknown_model_gives_a_clear_error(triton_url: str) -> None:
    with pytest.raises(SweepError, match="no_such_model"):
        await run_sweep(_quick(model="no_such_model"), triton_url)


async def test_an_unloaded_model_gives_a_clear_error(triton, triton_url: str) -> None:
    # The session's Triton is shared: make sure no earlier test left it loaded.
    await asyncio.to_thread(TritonClient(triton.grpc_url, triton.metrics_url).unload, "add_sub")
    with pytest.raises(SweepError, match="add_sub.*not loaded"):
        await run_sweep(_quick(model="add_sub"), triton_url)


async def test_http_protocol_works_too(triton, triton_url: str) -> None:
    result = await run_sweep(_quick(protocol="http", start=2, end=2), triton.http_url)
    assert result.levels[0].throughput > 0 and result.levels[0].errors == 0
