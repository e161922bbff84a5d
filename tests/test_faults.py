"""Fault injection against the real services: nothing crashes, nothing is lost or half-written."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from channels.layers import channel_layers
from django.db import connections
from django.test import Client

from devstack import services as svc
from profiler_app import jobs, sweeps
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from registry import servers
from repository_app import control, events
from repository_app.models import ControlAction
from triton_api.client import TritonClient, TritonError

from .conftest import ACTIVITY, SERVICE_START_S, start_celery_worker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "model_repository"


def _own_triton(
    tmp_path: Path, settings, *models: str
) -> tuple[subprocess.Popen, svc.TritonPorts, Path]:
    repo = tmp_path / "repo"
    for name in models:
        shutil.copytree(DEMO / name, repo / name)
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    log = tmp_path / "triton.log"
    proc = svc.start_tritonserver(repo, Path(settings.VAR_DIR), ports, log)
    settings.TRITON_URL = f"127.0.0.1:{ports.grpc}"
    settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports.metrics}/metrics"
    settings.MODEL_REPOSITORY = repo
    return proc, ports, log


def test_two_users_loading_and_unloading_at_once_end_in_one_consistent_state(triton, celery_worker):
    """A stress loop of concurrent load/unload requests from two users (each a job that a
    Celery worker runs)."""
    errors: list[BaseException] = []
    refusals: list[str] = []

    def user(name: str, actions: list[str]) -> None:
        for action in actions:
            try:
                control.start_action(servers.default(), action, "add_sub", name)
            except control.ActionRefused as exc:
                refusals.append(str(exc))
            except BaseException as exc:  # anything else is a bug
                errors.append(exc)
            time.sleep(0.05)
        connections.close_all()  # this thread's own database connection

    threads = [
        threading.Thread(target=user, args=("ann", ["load", "unload"] * 6)),
        threading.Thread(target=user, args=("ben", ["unload", "load"] * 6)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Overlapping requests are refused with a reason, never sent twice at once.
    assert all("already running" in r or "busy in Triton" in r for r in refusals), refusals
    open_jobs = ControlAction.objects.filter(state__in=("queued", "running"))
    wait_for(lambda: not open_jobs.exists(), 120, "every action to finish")
    assert ControlAction.objects.count() == 24 - len(refusals)
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    states = client.model_states("add_sub")
    assert len(states) == 1 and states[0].state in ("READY", "UNAVAILABLE")
    # What every viewer is shown agrees with Triton.
    viewer_state = Client()
    from django.contrib.auth import get_user_model

    viewer_state.force_login(get_user_model().objects.create_user("viewer-x"))
    shown = viewer_state.get("/models/states.json").json()["models"]["add_sub"]["state"]
    assert shown == states[0].state
    client.unload("add_sub")


def test_redis_down_pages_render_sweeps_get_503_and_the_worker_resumes_after(
    tmp_path, settings, triton, service_env, admin_user
):
    port = svc.free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis_proc = svc.start_redis(tmp_path, port, tmp_path / "redis.log")
    settings.REDIS_URL = settings.CELERY_BROKER_URL = url
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}
    }
    channel_layers.backends = {}
    from dashboard.celery_app import app

    app.conf.broker_url = url
    env = {**service_env, "REDIS_URL": url, "CELERY_BROKER_URL": url}
    worker_log = tmp_path / "worker.log"
    # Not waiting for a ping: this process's Celery app still points at the session broker.
    worker = start_celery_worker(env, worker_log, "redis-fault@localhost", wait=False)
    client = Client()
    client.force_login(admin_user)
    TritonClient(triton.grpc_url, triton.metrics_url).load("add_batched")
    try:
        wait_for(
            lambda: b"ready" in worker_log.read_bytes(), SERVICE_START_S, "the worker to start"
        )
        svc.stop(redis_proc)
        for path in ("/", "/models/", "/models/add_batched/", "/server/", "/sweeps/", "/audit/"):
            assert client.get(path).status_code == 200, path
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.json()["components"]["redis"]["up"] is False
        before = Sweep.objects.count()
        form = {"mode": "concurrency", "concurrency_range": "1:1:1", "percentile": "95",
                "measurement_interval": 300, "stability_percentage": 100, "max_trials": 3,
                "batch_size": 1, "input_data": "random", "engine": "builtin", "protocol": "grpc"}  # fmt: skip
        response = client.post("/models/add_batched/benchmark/", form)
        assert response.status_code == 503
        assert "the task queue (Redis at" in response.content.decode()
        api = client.post(
            "/api/v1/sweeps/", {"model": "add_batched", **form}, content_type="application/json"
        )
        assert api.status_code == 503 and "not queued" in api.json()["message"]
        assert Sweep.objects.count() == before  # nothing half-created
        # Load/unload still work: live updates are best effort.
        assert (
            client.post("/models/add_sub/load", HTTP_ACCEPT="application/json").status_code == 202
        )
        wait_for(lambda: not control._inflight, 60, "the load to finish")

        redis_proc = svc.start_redis(tmp_path, port, tmp_path / "redis.log")
        response = client.post("/models/add_batched/benchmark/", form)
        assert response.status_code == 302
        sweep = Sweep.objects.latest("pk")
        wait_for(
            lambda: Sweep.objects.get(pk=sweep.pk).state == "succeeded",
            180,
            "the worker to run the sweep",
        )
    finally:
        svc.stop(worker)
        svc.stop(redis_proc)
        channel_layers.backends = {}
        app.conf.broker_url = service_env["CELERY_BROKER_URL"]
        TritonClient(triton.grpc_url, triton.metrics_url).unload("add_sub")


async def test_a_consumer_that_falls_behind_is_bounded_and_sees_the_gap(redis_db, settings):
    """Redis keeps at most `capacity` messages per channel, so a consumer that stops reading
    (a stuck or slow connection) costs bounded memory; the events it missed show up as a
    hole in the sequence numbers, and the client resyncs over HTTP.

    Daphne's own write buffer towards a slow TCP peer is bounded separately
    (tests/test_websocket_backlog.py)."""
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer

    capacity = settings.CHANNEL_LAYERS["default"]["CONFIG"]["capacity"]
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(events.ACTIVITY_GROUP, channel)

    def burst() -> int:
        last = 0
        for i in range(capacity + 500):
            event = events.publish(events.ACTIVITY_GROUP, "activity", {**ACTIVITY, "n": i})
            last = event["seq"]
        return last

    last_seq = await sync_to_async(burst, thread_sensitive=False)()
    seqs = []
    # Every message is in Redis before the first receive: the first one only waits for a
    # busy machine (a generous bound), then five quiet seconds mean the channel is drained.
    # Stopping early could only leave fewer (never more) than `capacity` and a larger gap.
    timeout = 120.0
    while True:
        try:
            message = await asyncio.wait_for(layer.receive(channel), timeout=timeout)
        except TimeoutError:
            break
        seqs.append(message["event"]["seq"])
        timeout = 5.0
    assert seqs, "no event at all reached the consumer"
    await layer.group_discard(events.ACTIVITY_GROUP, channel)
    assert 0 < len(seqs) <= capacity
    assert seqs == sorted(seqs)
    missed = last_seq - seqs[-1] + sum(b - a - 1 for a, b in zip(seqs, seqs[1:], strict=False))
    assert missed >= 500  # the client can tell it missed events, and how many
    # The resync endpoint's counter is where live events continue.
    assert events.current_seq(events.ACTIVITY_GROUP) == last_seq


@pytest.fixture()
def tiny_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_during_a_config_save_leaves_the_old_config_intact(
    tiny_disk, settings, admin_user
):
    from repository_app.editor import saving

    repo = tiny_disk / "repo"
    shutil.copytree(DEMO / "add_sub", repo / "add_sub")
    settings.MODEL_REPOSITORY = repo
    config = repo / "add_sub" / "config.pbtxt"
    original = config.read_bytes()
    # Fill the disk to the last block (unbuffered, so nothing is left to flush on close).
    fd = os.open(tiny_disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    bigger = original.decode() + "\n" + "# padding to need new blocks\n" * 400
    with pytest.raises(saving.SaveError) as caught:
        saving.save_config(
            "add_sub", bigger, server=servers.default(), base_sha256=saving.sha256_hex(original),
            author_id=admin_user.pk, source="text",
        )  # fmt: skip
    assert "No space left" in caught.value.message or "full" in caught.value.message.lower()
    assert config.read_bytes() == original
    assert sorted(p.name for p in (repo / "add_sub").iterdir()) == ["1", "config.pbtxt"]
    client = Client()
    client.force_login(admin_user)
    response = client.put(
        "/api/v1/models/add_sub/config", {"text": bigger}, content_type="application/json",
        HTTP_IF_MATCH=saving.sha256_hex(original),
    )  # fmt: skip
    assert response.status_code == 507
    assert config.read_bytes() == original


def test_triton_stopped_mid_sweep_fails_it_clearly_and_keeps_partial_results(tmp_path, settings):
    proc, ports, _ = _own_triton(tmp_path, settings, "busy_compute")
    TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL).load("busy_compute")
    params = SweepParams(
        model="busy_compute", start=1, end=8, step=1, measurement_window_ms=300,
        stability_percentage=1, max_windows=20,
    )  # fmt: skip
    sweep = sweeps.create_sweep(servers.default(), params, enqueue=False)
    assert jobs.claim(sweep.pk)
    runner = threading.Thread(target=jobs.execute, args=(sweep.pk,))
    runner.start()
    try:
        wait_for(lambda: SweepPoint.objects.filter(sweep=sweep).count() >= 2, 60, "some points")
        svc.stop(proc)
        runner.join(120)
        assert not runner.is_alive()
        sweep.refresh_from_db()
        assert sweep.state in ("failed", "interrupted")
        assert sweep.error
        assert SweepPoint.objects.filter(sweep=sweep).count() >= 2  # partial results kept
    finally:
        svc.stop(proc)


def _load_workers_of_this_process() -> list[int]:
    """The load worker processes (`python -m profiler_app.engine.load_workers`) this test
    process started that are still there."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if ppid == os.getpid() and b"profiler_app.engine.load_workers" in cmdline:
            found.append(int(entry.name))
    return found


def _loaded(settings, name: str) -> bool:
    """Load `name` on the (restarted) Triton with a fresh client; False while it refuses."""
    try:
        TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL).load(name)
    except TritonError:
        return False
    return True


def test_triton_restarted_mid_stream_ends_the_sweep_clearly_and_leaves_no_worker(
    tmp_path, settings
):
    """A request-rate sweep over gRPC streams whose Triton stops and starts again while a
    level is being measured: the sweep fails with a message that says what happened, keeps
    the windows it measured, and leaves neither a running sweep nor a load worker."""
    proc, ports, log = _own_triton(tmp_path, settings, "stream_tok")
    control_client = TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL)
    control_client.load("stream_tok")
    # Stability 1% over levels of 20 windows: the sweep is still measuring when Triton goes.
    params = SweepParams(
        model="stream_tok", streaming=True, mode="request_rate", start=20, end=60, step=20,
        measurement_window_ms=300, stability_percentage=1, max_windows=20, arrival="poisson",
    )  # fmt: skip
    sweep = sweeps.create_sweep(servers.default(), params, enqueue=False)
    assert jobs.claim(sweep.pk)
    runner = threading.Thread(target=jobs.execute, args=(sweep.pk,))
    runner.start()
    try:
        # Upper bounds only (a broken run must not hang), never targets.
        wait_for(lambda: SweepPoint.objects.filter(sweep=sweep).count() >= 2, 60, "some points")
        svc.stop(proc)
        proc = svc.start_tritonserver(tmp_path / "repo", Path(settings.VAR_DIR), ports, log)
        wait_for(lambda: _loaded(settings, "stream_tok"), 60, "stream_tok back on Triton")
        runner.join(120)
        assert not runner.is_alive()
        sweep.refresh_from_db()
        assert sweep.state == "failed", (sweep.state, sweep.error)
        # What happened, in Triton's words or ours: the model went first (Triton unloads
        # it as it stops, the stream still open) or the stream broke.
        assert "request(s) failed at request rate 20" in sweep.error, sweep.error
        assert any(
            words in sweep.error for words in ("unknown model", "went away mid-stream", "closed")
        ), sweep.error
        assert SweepPoint.objects.filter(sweep=sweep, window__gte=0).count() >= 2  # kept
        assert not _load_workers_of_this_process()
    finally:
        svc.stop(proc)
        runner.join(60)
