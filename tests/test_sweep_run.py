"""Sweeps through the real Celery worker against the real Triton, with live events."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import signal
import subprocess
import time
from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from dashboard.routing import websocket_urlpatterns
from profiler_app import export, jobs, sweep_plan, sweeps, watchdog
from profiler_app.engine.perf_analyzer_csv import CSV_COLUMNS
from profiler_app.jobs import run_job_task
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from registry import servers
from triton_api.client import TritonClient

from .conftest import start_celery_worker, wait_for, wait_for_job

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

APP = URLRouter(websocket_urlpatterns)
USER = SimpleNamespace(is_authenticated=True)


@pytest.fixture()
def add_batched(triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    yield "add_batched"
    client.unload("add_batched")


def _params(**overrides) -> SweepParams:
    base = dict(
        model="add_batched",
        start=1,
        end=3,
        measurement_window_ms=500,
        stability_percentage=50,
        max_windows=3,
    )
    return SweepParams(**{**base, **overrides})


def _state(pk: int) -> str:
    return Sweep.objects.get(pk=pk).state


def _assert_no_holes(sweep: Sweep) -> None:
    """Each level's windows are 0..n-1, once each, and its level row counts them."""
    for level in SweepPoint.objects.filter(sweep=sweep, window=-1):
        windows = list(
            SweepPoint.objects.filter(sweep=sweep, level=level.level, window__gte=0)
            .order_by("window")
            .values_list("window", flat=True)
        )
        assert windows == list(range(len(windows))) and len(windows) == level.extra["windows"]


async def test_a_short_sweep_completes_and_streams_windows_levels_and_summary_in_order(
    add_batched, celery_worker, redis_db
):
    sweep = await sync_to_async(sweeps.create_sweep)(servers.default(), _params(), enqueue=False)
    communicator = WebsocketCommunicator(APP, f"/ws/sweeps/{sweep.pk}/")
    communicator.scope["user"] = USER
    connected, _ = await communicator.connect()
    assert connected
    snapshot = await communicator.receive_json_from(timeout=60)
    assert snapshot["type"] == "sweep.snapshot" and snapshot["points"] == []
    await sync_to_async(jobs.dispatch)(sweep.pk)
    received = []
    try:
        deadline = time.monotonic() + 300  # a bound, not a target
        while not received or received[-1]["type"] != "sweep.summary":
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no summary; got {[e['type'] for e in received]}"
            received.append(await communicator.receive_json_from(timeout=remaining))
    finally:
        await communicator.disconnect()
    seqs = [e["seq"] for e in received]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "seq strictly increasing"
    kinds = [e["type"] for e in received if e["type"] != "sweep.state"]
    assert kinds[-1] == "sweep.summary" and kinds.count("sweep.level") == 3
    # Per level: its windows (0, 1, ...) and then the level event.
    for level in (1.0, 2.0, 3.0):
        mine = [e for e in received if e.get("point", {}).get("level") == level]
        assert [e["type"] for e in mine][-1] == "sweep.level"
        assert [e["point"]["window"] for e in mine[:-1]] == list(range(len(mine) - 1))
        assert len(mine) - 1 >= 3
    assert received[-1]["state"] == "succeeded"

    stored = await sync_to_async(Sweep.objects.get)(pk=sweep.pk)
    assert stored.state == "succeeded" and stored.finished_at and stored.error == ""
    # The summary event carries the stored verdict (whether a level settled is the
    # machine's business, not this test's).
    assert received[-1]["summary"] == stored.summary and stored.summary["recommendation"]
    window_events = sum(1 for e in received if e["type"] == "sweep.window")
    count = await sync_to_async(SweepPoint.objects.filter(sweep=stored, window__gte=0).count)()
    assert count == window_events
    await sync_to_async(_assert_no_holes)(stored)
    rows = list(csv.reader(io.StringIO(await sync_to_async(export.to_csv)(stored))))
    # perf_analyzer's columns, then each level's interval (the built-in engine's).
    assert rows[0] == [*CSV_COLUMNS, *export.INTERVAL_CSV_COLUMNS]
    assert [float(r[0]) for r in rows[1:]] == [1.0, 2.0, 3.0]
    assert all(float(r[1]) > 0 and int(r[11]) > 0 for r in rows[1:])


def test_the_csv_download_has_perf_analyzers_columns(
    add_batched, celery_worker, redis_db, admin_client
):
    sweep = sweeps.create_sweep(servers.default(), _params(end=2))
    wait_for_job(sweep.pk, "succeeded", 240, "the sweep to succeed")
    response = admin_client.get(f"/sweeps/{sweep.pk}/export.csv")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [*CSV_COLUMNS, *export.INTERVAL_CSV_COLUMNS] and len(rows) == 3
    data = admin_client.get(f"/sweeps/{sweep.pk}/data.json").json()
    assert {(p["level"], p["window"]) for p in data["points"]} >= {(1.0, -1), (2.0, -1)}
    exported = admin_client.get(f"/sweeps/{sweep.pk}/export.json").json()
    assert exported["sweep"]["config_text"] and len(exported["points"]) == len(data["points"])


def test_cancel_stops_the_sweep_and_keeps_its_partial_points(add_batched, celery_worker, redis_db):
    sweep = sweeps.create_sweep(
        servers.default(), _params(start=1, end=4, stability_percentage=0.001, max_windows=10)
    )
    wait_for(
        lambda: SweepPoint.objects.filter(sweep_id=sweep.pk, window__gte=0).count() >= 2,
        180,
        "two windows",
    )
    assert "within one measurement window" in jobs.cancel(sweep.pk)
    wait_for_job(sweep.pk, "cancelled", 180, "the sweep to be cancelled")
    stored = Sweep.objects.get(pk=sweep.pk)
    assert stored.finished_at and stored.error == ""
    points = SweepPoint.objects.filter(sweep=stored)
    assert points.filter(window__gte=0).count() >= 2
    assert points.filter(window=-1, level=4).count() == 0, "it never reached the last level"
    assert not Sweep.objects.filter(state="running").exists()


def test_one_sweep_at_a_time_the_second_waits_with_position_one_and_runs_after(
    add_batched, celery_worker, redis_db
):
    first = sweeps.create_sweep(servers.default(), _params(end=2))
    second = sweeps.create_sweep(servers.default(), _params(end=1))
    # Generous bounds: on a busy two-core machine the worker may still be finishing the
    # previous test's sweep. They bound the wait; they are not a speed target.
    wait_for_job(first.pk, "running", 240, "the first sweep to start")
    assert _state(second.pk) == "queued"
    assert jobs.queue_position(Sweep.objects.get(pk=second.pk)) == 1
    wait_for_job(second.pk, "succeeded", 300, "the second sweep to succeed")
    first, second = Sweep.objects.get(pk=first.pk), Sweep.objects.get(pk=second.pk)
    assert first.state == "succeeded"
    assert second.started_at >= first.finished_at


def test_a_model_that_is_not_loaded_fails_the_sweep_with_a_clear_message(
    triton, celery_worker, redis_db
):
    TritonClient(triton.grpc_url, triton.metrics_url).unload("add_sub")
    sweep = sweeps.create_sweep(servers.default(), _params(model="add_sub"))
    wait_for_job(sweep.pk, "failed", 180, "the sweep to fail")
    assert "not loaded/ready" in Sweep.objects.get(pk=sweep.pk).error


def _own_worker(service_env, tmp_path, queue: str) -> tuple[subprocess.Popen, str]:
    hostname = f"killme-{os.getpid()}-{time.monotonic_ns()}@localhost"
    log = tmp_path / "killed-worker.log"
    return start_celery_worker(service_env, log, hostname, f"--queues={queue}"), hostname


def test_a_killed_worker_leaves_the_sweep_interrupted_and_resume_completes_it(
    add_batched, service_env, celery_worker, redis_db, tmp_path
):
    queue = f"kill-test-{os.getpid()}"
    proc, _ = _own_worker(service_env, tmp_path, queue)
    try:
        sweep = sweeps.create_sweep(
            servers.default(),
            _params(start=1, end=3, max_windows=4, stability_percentage=50),
            enqueue=False,
        )
        soft, hard = sweep_plan.time_limits(sweeps.params_of(sweep))
        run_job_task.apply_async(
            args=["sweep", sweep.pk], queue=queue, soft_time_limit=soft, time_limit=hard
        )
        wait_for(
            lambda: (
                SweepPoint.objects.filter(sweep_id=sweep.pk, window=-1).exists()
                and SweepPoint.objects.filter(sweep_id=sweep.pk, level=2, window__gte=0).exists()
            ),
            60,
            "level 1 done and level 2 started",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert _state(sweep.pk) == "running"
    # The watchdog (the worker thread, or this lazy check) declares it within 60 s.
    wait_for(lambda: watchdog.check() or _state(sweep.pk) == "interrupted", 180, "interrupted")
    wait_for_job(sweep.pk, "interrupted", 60, "interrupted")
    assert "heartbeat" in Sweep.objects.get(pk=sweep.pk).error
    level_one = SweepPoint.objects.get(sweep_id=sweep.pk, level=1, window=-1)

    jobs.resume(sweep.pk)
    wait_for_job(sweep.pk, "succeeded", 240, "the resumed sweep to succeed")
    stored = Sweep.objects.get(pk=sweep.pk)
    assert stored.attempts == 2
    levels = SweepPoint.objects.filter(sweep=stored, window=-1).order_by("level")
    assert [p.level for p in levels] == [1.0, 2.0, 3.0]
    # Level 1 was kept as measured, not measured again.
    assert levels[0].recorded_at == level_one.recorded_at
    _assert_no_holes(stored)


async def test_a_late_joiner_gets_every_point_so_far_first(add_batched, celery_worker, redis_db):
    sweep = await sync_to_async(sweeps.create_sweep)(servers.default(), _params(end=1))
    await sync_to_async(wait_for)(
        lambda: _state(sweep.pk) in Sweep.FINISHED, 180, "the sweep to finish"
    )
    communicator = WebsocketCommunicator(APP, f"/ws/sweeps/{sweep.pk}/")
    communicator.scope["user"] = USER
    connected, _ = await communicator.connect()
    assert connected
    snapshot = await communicator.receive_json_from(timeout=60)
    await communicator.disconnect()
    count = await sync_to_async(SweepPoint.objects.filter(sweep_id=sweep.pk).count)()
    assert snapshot["snapshot"] and len(snapshot["points"]) == count >= 4
    assert snapshot["sweep"]["state"] == "succeeded" and snapshot["seq"] > 0
    await asyncio.sleep(0)


def test_a_sweep_traces_the_first_requests_of_each_level(triton, celery_worker, redis_db):
    """trace_sample 3: Triton traces the first three requests of each level (armed again
    after each level's summary); each level keeps their median timeline; tracing is off
    once the sweep ends."""
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states("add_sub"))
    client.load("add_sub")
    try:
        sweep = sweeps.create_sweep(
            servers.default(), _params(model="add_sub", end=2, trace_sample=3)
        )
        done = wait_for_job(
            sweep.pk, lambda job: job.state in Sweep.FINISHED, 300, "the traced sweep"
        )
        assert done.state == "succeeded", done.error
        levels = list(SweepPoint.objects.filter(sweep=done, window=-1).order_by("level"))
        assert [p.level for p in levels] == [1.0, 2.0]
        for point in levels:
            assert point.extra["traced"] == 3
            assert 0 < point.extra["traced_infer_us"] <= point.extra["traced_total_us"]
            assert point.extra["traced_queue_us"] is not None
        assert client.trace_settings("add_sub")["trace_level"] == ["OFF"]
    finally:
        client.update_trace_settings("add_sub", {"trace_level": ["OFF"]})
        if not was_ready:
            client.unload("add_sub")
