"""The stored metrics history: recording, roll-up, pruning, the JSON the Server page reads,
and the poller writing it from a real Triton. Times are frozen epoch seconds: no sleeps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from fleet.poller import Poller
from profiler_app.models import Sweep
from registry import servers
from repository_app import history
from repository_app.models import (
    ConfigRevision,
    GpuMetricPoint,
    ModelMetricPoint,
    ServerMetricPoint,
)
from triton_api.prometheus import parse_prometheus

T0 = 1_800_000_000  # a multiple of 60: minute and 10 s boundaries line up with it
DAY = 86400


def scrape(success=0, failure=0, inferences=0, executions=0, queue=0, compute=0, pending=0,
           cpu=0.5, gpu=True, p99=None):  # fmt: skip
    """A Triton /metrics text with two versions of model m (summed per model)."""
    half = success / 2
    text = f"""
nv_inference_request_success{{model="m",version="1"}} {half}
nv_inference_request_success{{model="m",version="2"}} {success - half}
nv_inference_request_failure{{model="m",reason="BACKEND",version="1"}} {failure}
nv_inference_request_failure{{model="m",reason="REJECTED",version="1"}} 0
nv_inference_count{{model="m",version="1"}} {inferences}
nv_inference_exec_count{{model="m",version="1"}} {executions}
nv_inference_request_duration_us{{model="m",version="1"}} {queue + compute}
nv_inference_queue_duration_us{{model="m",version="1"}} {queue}
nv_inference_compute_input_duration_us{{model="m",version="1"}} {compute / 4}
nv_inference_compute_infer_duration_us{{model="m",version="1"}} {compute / 2}
nv_inference_compute_output_duration_us{{model="m",version="1"}} {compute / 4}
nv_inference_pending_request_count{{model="m",version="1"}} {pending}
nv_cpu_utilization {cpu}
nv_cpu_memory_total_bytes 1000
nv_cpu_memory_used_bytes 400
"""
    if p99 is not None:
        text += (
            f'nv_inference_request_summary_us{{model="m",version="1",quantile="0.5"}} {p99 / 2}\n'
        )
        text += f'nv_inference_request_summary_us{{model="m",version="1",quantile="0.99"}} {p99}\n'
        text += 'nv_inference_request_summary_us{model="m",version="2",quantile="0.99"} NaN\n'
    if gpu:
        text += (
            'nv_gpu_utilization{gpu_uuid="GPU-a"} 0.25\nnv_gpu_power_usage{gpu_uuid="GPU-a"} 70\n'
        )
        text += 'nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 2048\n'
    return parse_prometheus(text)


def fine_row(model: str, ts: int, **values) -> ModelMetricPoint:
    return ModelMetricPoint(ts=ts, resolution_s=history.FINE_S, model=model, **values)


# --- recording -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_recorder_writes_one_row_per_model_server_and_gpu_for_each_closed_interval():
    recorder = history.HistoryRecorder("default")
    assert recorder.observe(T0, scrape(cpu=0.2)) == 0
    assert recorder.observe(T0 + 4, scrape(success=40, failure=4, inferences=80, executions=20,
                                           queue=400, compute=4000, pending=2, cpu=0.4,
                                           p99=900)) == 0  # fmt: skip
    assert ModelMetricPoint.objects.count() == 0  # the interval is still open
    # The first scrape of the next interval closes [T0, T0 + 10).
    assert recorder.observe(T0 + 10, scrape(success=50)) == 3
    row = ModelMetricPoint.objects.get()
    assert (row.ts, row.resolution_s, row.model) == (T0, 10, "m")
    assert row.requests_per_s == 11.0  # 40 successes + 4 failures in 4 s
    assert row.failures_per_s == 1.0
    assert row.queue_us == 10.0 and row.compute_us == 100.0  # per successful request
    assert row.request_us == 110.0
    assert row.batch_size == 4.0  # 80 inferences in 20 executions
    assert row.pending == 1.0  # the mean of 0 and 2
    assert row.p99_us == 900 and row.p50_us == 450  # version 2's NaN quantile is ignored
    server = ServerMetricPoint.objects.get()
    assert server.cpu_utilization == pytest.approx(0.3)
    assert (server.cpu_memory_used_bytes, server.cpu_memory_total_bytes) == (400, 1000)
    gpu = GpuMetricPoint.objects.get()
    assert (gpu.gpu, gpu.utilization, gpu.power_w, gpu.memory_used_bytes) == (
        "GPU-a",
        0.25,
        70,
        2048,
    )
    assert gpu.memory_total_bytes is None  # not exported here: stored as absent, not 0


@pytest.mark.django_db
def test_rates_span_from_the_last_scrape_before_the_interval_so_no_request_is_lost():
    recorder = history.HistoryRecorder("default")
    recorder.observe(T0 + 8, scrape(success=0))
    recorder.observe(T0 + 12, scrape(success=20))  # closes [T0, T0+10): one scrape, no span
    recorder.observe(T0 + 18, scrape(success=100))
    recorder.observe(T0 + 20, scrape(success=100))  # closes [T0+10, T0+20)
    first, second = ModelMetricPoint.objects.order_by("ts")
    assert first.requests_per_s is None and first.queue_us is None
    # From T0+8 (the previous interval's last scrape) to T0+18: 100 requests in 10 s.
    assert second.requests_per_s == 10.0


@pytest.mark.django_db
def test_after_a_gap_rates_start_again_instead_of_landing_on_one_interval():
    recorder = history.HistoryRecorder("default")
    recorder.observe(T0, scrape(success=0))
    recorder.observe(T0 + 8, scrape(success=10))
    recorder.observe(T0 + 300, scrape(success=5000))  # the poller was away for minutes
    recorder.observe(T0 + 304, scrape(success=5040))
    recorder.observe(T0 + 310, scrape(success=5040))
    rows = {r.ts: r.requests_per_s for r in ModelMetricPoint.objects.all()}
    assert rows == {T0: 1.25, T0 + 300: 10.0}


@pytest.mark.django_db
def test_a_counter_that_went_down_is_a_restart_and_its_value_the_increase():
    recorder = history.HistoryRecorder("default")
    recorder.observe(T0, scrape(success=1000))
    recorder.observe(T0 + 10, scrape(success=1000))
    recorder.observe(T0 + 15, scrape(success=30))  # Triton restarted: counters from 0
    recorder.observe(T0 + 20, scrape(success=30))
    rows = {r.ts: r.requests_per_s for r in ModelMetricPoint.objects.all()}
    assert rows[T0 + 10] == 2.0  # 30 requests since the scrape at T0, 15 s before


@pytest.mark.django_db
def test_a_model_loaded_since_the_last_scrape_counts_from_zero():
    recorder = history.HistoryRecorder("default")
    others = parse_prometheus('nv_inference_request_success{model="other",version="1"} 5\n')
    recorder.observe(T0, others)
    recorder.observe(T0 + 5, others + scrape(success=20))  # m was loaded in between
    recorder.observe(T0 + 10, others)
    assert ModelMetricPoint.objects.get(model="m").requests_per_s == 4.0  # 20 in 5 s


@pytest.mark.django_db
def test_an_idle_interval_has_zero_rates_and_no_times():
    recorder = history.HistoryRecorder("default")
    recorder.observe(T0, scrape(success=7))
    recorder.observe(T0 + 5, scrape(success=7))
    recorder.observe(T0 + 10, scrape(success=7))
    row = ModelMetricPoint.objects.get()
    assert row.requests_per_s == 0.0 and row.failures_per_s == 0.0
    assert row.queue_us is None and row.compute_us is None and row.batch_size is None


# --- roll-up and pruning ---------------------------------------------------------------------


@pytest.mark.django_db
def test_complete_minutes_roll_up_into_one_minute_rows_with_means_and_the_worst_p99():
    rows = [fine_row("m", T0 + 10 * i, requests_per_s=float(i), queue_us=None if i % 2 else 100.0,
                     p99_us=float(100 * i), pending=1.0) for i in range(6)]  # fmt: skip
    rows += [fine_row("m", T0 + 60, requests_per_s=50.0), fine_row("n", T0, requests_per_s=4.0)]
    ModelMetricPoint.objects.bulk_create(rows)
    ServerMetricPoint.objects.bulk_create(
        [
            ServerMetricPoint(ts=T0 + 10 * i, resolution_s=10, cpu_utilization=i / 10)
            for i in range(6)
        ]
    )
    GpuMetricPoint.objects.create(ts=T0 + 20, resolution_s=10, gpu="GPU-a", power_w=80)
    # At T0 + 60 + SETTLE_S the minute from T0 is complete, the one from T0 + 60 is not.
    written = history.roll_up(T0 + 60 + history.SETTLE_S, "default")
    assert written == 4  # m and n, the server, the GPU
    m = ModelMetricPoint.objects.get(resolution_s=60, model="m")
    assert m.ts == T0
    assert m.requests_per_s == 2.5  # the mean of 0..5
    assert m.queue_us == 100.0  # idle intervals (None) do not pull the mean down
    assert m.p99_us == 500.0  # the worst interval's
    assert ModelMetricPoint.objects.get(resolution_s=60, model="n").requests_per_s == 4.0
    assert ServerMetricPoint.objects.get(resolution_s=60).cpu_utilization == pytest.approx(0.25)
    assert GpuMetricPoint.objects.get(resolution_s=60).power_w == 80
    # The 10 s rows stay (for 24 h); rolling up again writes nothing twice.
    assert ModelMetricPoint.objects.filter(resolution_s=10).count() == 8
    assert history.roll_up(T0 + 60 + history.SETTLE_S, "default") == 0
    assert (
        history.roll_up(T0 + 120 + history.SETTLE_S, "default") == 1
    )  # the next minute, when complete
    assert ModelMetricPoint.objects.get(resolution_s=60, ts=T0 + 60).requests_per_s == 50.0


@pytest.mark.django_db
def test_maintenance_keeps_10s_rows_for_24h_and_minute_rows_for_14_days():
    now = T0 + 20 * DAY
    ModelMetricPoint.objects.bulk_create([
        fine_row("m", now - DAY - 120, requests_per_s=1.0),  # older than 24 h
        fine_row("m", now - DAY + 60, requests_per_s=2.0),  # within 24 h
        ModelMetricPoint(ts=now - 15 * DAY, resolution_s=60, model="m", requests_per_s=3.0),
        ModelMetricPoint(ts=now - 13 * DAY, resolution_s=60, model="m", requests_per_s=4.0),
    ])  # fmt: skip
    ServerMetricPoint.objects.create(ts=now - 15 * DAY, resolution_s=60, cpu_utilization=0.1)
    GpuMetricPoint.objects.create(ts=now - DAY - 60, resolution_s=10, gpu="GPU-a")
    rolled, deleted = history.maintain(now, "default")
    # Both 10 s model rows were rolled up before the older one was deleted.
    assert rolled >= 2
    fine = ModelMetricPoint.objects.filter(resolution_s=10).values_list("ts", flat=True)
    assert list(fine) == [now - DAY + 60]
    coarse = dict(
        ModelMetricPoint.objects.filter(resolution_s=60).values_list("ts", "requests_per_s")
    )
    assert coarse == {now - 13 * DAY: 4.0, now - DAY - 120: 1.0, now - DAY + 60: 2.0}
    assert not ServerMetricPoint.objects.filter(ts__lt=now - 14 * DAY).exists()
    assert not GpuMetricPoint.objects.filter(resolution_s=10).exists()
    assert deleted == 4  # 1 fine and 1 coarse model row, the server row, the GPU row


@pytest.mark.django_db
def test_retention_follows_the_settings(settings):
    settings.HISTORY_FINE_RETENTION_H = 1
    settings.HISTORY_RETENTION_DAYS = 2
    now = T0 + 10 * DAY
    ModelMetricPoint.objects.bulk_create([
        fine_row("m", now - 2 * 3600, requests_per_s=1.0),
        ModelMetricPoint(ts=now - 3 * DAY, resolution_s=60, model="m"),
        ModelMetricPoint(ts=now - DAY, resolution_s=60, model="m"),
    ])  # fmt: skip
    history.prune(now, "default")
    assert list(ModelMetricPoint.objects.values_list("resolution_s", "ts")) == [(60, now - DAY)]


def test_each_range_is_drawn_with_at_most_360_points():
    steps = {key: history.step_for(span) for key, span in history.RANGES.items()}
    assert steps == {"live": 10, "1h": 10, "6h": 60, "24h": 300, "7d": 1800, "14d": 3600}
    assert all(span / steps[key] <= history.POINTS for key, span in history.RANGES.items())


# --- what the Server page reads ---------------------------------------------------------------


@pytest.fixture()
def viewer(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("vera", password="pw-vera-1"))
    return client


def _at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@pytest.mark.django_db
def test_a_range_is_read_in_buckets_with_gaps_and_absent_figures_left_out():
    now = T0 + 3600
    ModelMetricPoint.objects.bulk_create(
        [fine_row("m", now - 600 + 10 * i, requests_per_s=1.0, pending=0.0) for i in range(3)]
        + [fine_row("m", now - 300, requests_per_s=3.0, pending=0.0)]
    )
    data = history.history_json("1h", now, servers.default())
    assert (data["range"], data["step_s"], data["resolution_s"]) == ("1h", 10, 10)
    m = data["models"]["m"]
    assert m["t"] == [now - 600, now - 590, now - 580, now - 570, now - 300]
    assert m["requests_per_s"] == [1.0, 1.0, 1.0, None, 3.0]  # a None breaks the line
    assert {type(v) for v in m["requests_per_s"]} == {float, type(None)}  # not Decimal (PostgreSQL)
    assert "p99_us" not in m and "queue_us" not in m  # never exported: no empty series
    assert data["server"] == {"t": []} and data["cpu_metrics_present"] is False
    assert data["gpus"] == {} and data["gpu_metrics_present"] is False


@pytest.mark.django_db
def test_minute_rows_roll_up_into_5_and_30_minute_rows_that_long_ranges_read():
    now = T0 + 2 * DAY
    first = now - 5 * DAY
    ModelMetricPoint.objects.bulk_create(
        [ModelMetricPoint(ts=first + 60 * i, resolution_s=60, model="m",
                          requests_per_s=float(i % 10), p99_us=float(i)) for i in range(60)]
        + [fine_row("m", now - 3600, requests_per_s=9.0)]
    )  # fmt: skip
    history.roll_up(now, "default")  # the 10 s row's minute is complete: it goes up every tier too
    five = ModelMetricPoint.objects.filter(resolution_s=300).order_by("ts")
    assert [r.ts for r in five] == [first + 300 * i for i in range(12)] + [now - 3600]
    assert five[0].requests_per_s == 2.0 and five[0].p99_us == 4.0  # minutes 0..4
    half_hours = ModelMetricPoint.objects.filter(resolution_s=1800).order_by("ts")
    assert [(r.ts, r.requests_per_s, r.p99_us) for r in half_hours] == [
        (first, 4.5, 29.0),
        (first + 1800, 4.5, 59.0),
        (now - 3600, 9.0, None),
    ]
    day = history.history_json("24h", now, servers.default())
    assert (day["resolution_s"], day["step_s"]) == (300, 300)
    assert day["models"]["m"]["requests_per_s"] == [9.0]
    week = history.history_json("7d", now, servers.default())
    assert (week["resolution_s"], week["step_s"]) == (1800, 1800)
    rates = week["models"]["m"]["requests_per_s"]
    assert rates[:3] == [4.5, 4.5, None] and rates[-1] == 9.0  # None: the gap between
    fortnight = history.history_json("14d", now, servers.default())
    assert (fortnight["resolution_s"], fortnight["step_s"]) == (1800, 3600)
    assert fortnight["models"]["m"]["requests_per_s"][0] == 4.5
    assert fortnight["models"]["m"]["p99_us"][0] == 59.0


@pytest.mark.django_db
def test_sweeps_and_config_changes_in_the_range_are_markers(viewer):
    now = datetime.now(UTC).timestamp()
    sweep = Sweep.objects.create(model="add_sub", server="default", params={})
    Sweep.objects.filter(pk=sweep.pk).update(
        created_at=_at(int(now) - 1800), started_at=_at(int(now) - 1790),
        finished_at=_at(int(now) - 1200), state=Sweep.State.SUCCEEDED,
    )  # fmt: skip
    old = Sweep.objects.create(model="add_sub", server="default", params={})
    Sweep.objects.filter(pk=old.pk).update(created_at=_at(int(now) - 3 * DAY),
                                           finished_at=_at(int(now) - 3 * DAY + 60))  # fmt: skip
    ConfigRevision.objects.create(model="add_sub", text="x", sha256="0" * 64, source="text")
    response = viewer.get("/server/history.json", {"range": "1h"})
    assert response.status_code == 200
    markers = response.json()["markers"]
    assert [(m["kind"], m["model"]) for m in markers] == [
        ("sweep", "add_sub"),
        ("config", "add_sub"),
    ]
    swept, config = markers
    assert (swept["t"], swept["end"]) == (int(now) - 1790, int(now) - 1200)
    assert swept["url"] == f"/sweeps/{sweep.pk}/" and f"sweep #{sweep.pk}" in swept["label"]
    assert config["end"] is None and "config #1" in config["label"]
    assert config["url"] == "/models/add_sub/config/history/"
    week = viewer.get("/server/history.json", {"range": "7d"}).json()["markers"]
    assert len([m for m in week if m["kind"] == "sweep"]) == 2


@pytest.mark.django_db
def test_the_first_editor_save_is_one_config_marker_not_also_a_change_on_disk(tmp_path):
    import shutil
    from pathlib import Path

    from repository_app.editor import saving

    from .conftest import on_repository

    demo = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
    shutil.copytree(demo / "add_sub", tmp_path / "add_sub")
    server = on_repository(tmp_path)
    current = saving.read_current("add_sub", server)
    saving.save_config(
        "add_sub", current.text.replace("# ", "#  ", 1) + "\n", server=server,
        base_sha256=current.sha256, author_id=None, source=ConfigRevision.Source.FORM,
    )  # fmt: skip
    # The file as first read is kept (history, restore) but is no change: no marker.
    first, saved = ConfigRevision.objects.order_by("id")
    assert first.first_seen and first.source_label == "first seen"
    now = datetime.now(UTC).timestamp()
    markers = history.markers(now - 3600, now + 60, server)
    assert [m["label"] for m in markers] == [f"add_sub config #{saved.number} (form editor)"]
    # A change made on disk since is one.
    (tmp_path / "add_sub" / "config.pbtxt").write_text(current.text)
    changed = saving.record_disk_change("add_sub", server)
    assert changed is not None and not changed.first_seen
    labels = {m["label"] for m in history.markers(now - 3600, now + 60, server)}
    assert labels == {
        f"add_sub config #{saved.number} (form editor)",
        f"add_sub config #{changed.number} (changed on disk)",
    }


@pytest.mark.django_db
def test_the_history_endpoint_refuses_unknown_ranges_and_anonymous_callers(viewer):
    response = viewer.get("/server/history.json", {"range": "3w"})
    assert response.status_code == 400
    assert response.json()["message"].startswith("unknown range '3w'")
    assert Client().get("/server/history.json").status_code == 302


# --- the poller, against a real Triton ------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_poller_writes_history_rows_from_a_real_triton(triton, redis_db):
    from triton_api.client import TritonClient

    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states("add_sub"))
    client.load("add_sub")
    clock = iter(float(T0 + 3 * i) for i in range(100))
    poller = Poller(servers.default(), interval_s=1, slow_every=1, clock=lambda: next(clock))
    try:
        for _ in range(9):  # scrapes at T0, T0 + 3 ... T0 + 24: two intervals closed
            poller.tick()
    finally:
        if not was_ready:
            client.unload("add_sub")
    # The session's Celery worker runs a poller too, writing rows at real times: keep to
    # this poller's frozen clock.
    rows = ModelMetricPoint.objects.filter(
        resolution_s=10, model="add_sub", ts__gte=T0, ts__lt=T0 + 100
    ).order_by("ts")
    assert [r.ts for r in rows] == [T0, T0 + 10]
    latest = rows.last()
    assert latest.requests_per_s is not None and latest.failures_per_s is not None
    assert latest.pending is not None
    cpu_rows = ServerMetricPoint.objects.filter(resolution_s=10, ts__gte=T0, ts__lt=T0 + 100)
    assert cpu_rows.count() == 2
    # Triton exports nv_cpu_* on Linux; this CPU-only machine exports no nv_gpu_* at all.
    assert all(s.cpu_utilization is not None and s.cpu_memory_total_bytes for s in cpu_rows)
    assert not GpuMetricPoint.objects.exists()
