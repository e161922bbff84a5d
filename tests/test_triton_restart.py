"""Triton stopped while the dashboard is in use: a banner, then automatic recovery, and
"restore previous loads" after a restart in explicit mode (runtime loads are forgotten)."""

import shutil
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client

from devstack import services as svc
from registry import servers
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"


def _wait(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.2)


def test_banner_while_triton_is_down_then_recovery_and_restore(
    tmp_path, settings, admin_user, actions_here
):
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(DEMO / "add_sub", repo / "add_sub")
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    log = tmp_path / "triton.log"
    proc = svc.start_tritonserver(repo, Path(django_settings.VAR_DIR), ports, log)
    settings.TRITON_URL = f"127.0.0.1:{ports.grpc}"
    settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports.metrics}/metrics"
    settings.MODEL_REPOSITORY = repo
    client = Client()
    client.force_login(admin_user)
    triton = TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL)
    try:
        started = client.post("/models/add_sub/load", HTTP_ACCEPT="application/json")
        assert started.status_code == 202, started.content
        assert actions_here() == ["succeeded"]  # as a worker would, against this Triton
        _wait(lambda: [s.state for s in triton.model_states("add_sub")] == ["READY"])
        _wait(lambda: "READY" in client.get("/models/").content.decode())

        svc.stop(proc)
        html = client.get("/models/").content.decode()
        assert f"Triton unreachable at {settings.TRITON_URL}" in html
        assert 'data-model="add_sub"' in html  # from disk
        detail = client.get("/models/add_sub/").content.decode()
        assert "Triton unreachable at" in detail
        response = client.post("/models/add_sub/reload", HTTP_ACCEPT="application/json")
        assert response.status_code == 409
        assert response.json()["message"] == f"Triton unreachable at {settings.TRITON_URL}"

        # Same ports again: the dashboard recovers by itself; the runtime load is gone.
        proc = svc.start_tritonserver(repo, Path(django_settings.VAR_DIR), ports, log)
        html = client.get("/models/").content.decode()
        assert 'id="triton-banner" class="banner error" hidden' in html
        assert 'id="restore-banner"' in html
        assert "(add_sub)" in html
        response = client.post("/models/restore")
        assert response.status_code == 302
        assert actions_here() == ["succeeded"]
        _wait(lambda: [s.state for s in triton.model_states("add_sub")] == ["READY"])
        html = client.get("/models/").content.decode()
        assert 'id="restore-banner"' not in html
    finally:
        svc.stop(proc)


def test_load_and_unload_are_disabled_with_the_reason_outside_explicit_mode(
    tmp_path, settings, admin_user
):
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(DEMO / "add_sub", repo / "add_sub")
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    proc = svc.start_tritonserver(
        repo, Path(django_settings.VAR_DIR), ports, tmp_path / "triton.log", control_mode="none"
    )
    settings.TRITON_URL = f"127.0.0.1:{ports.grpc}"
    settings.MODEL_REPOSITORY = repo
    client = Client()
    client.force_login(admin_user)
    try:
        html = client.get("/models/add_sub/").content.decode()
        assert 'data-action="load" disabled' in html
        assert "Load/unload unavailable: Triton runs in NONE or POLL model control mode" in html
        response = client.post("/models/add_sub/unload", HTTP_ACCEPT="application/json")
        assert response.status_code == 409
        assert "--model-control-mode=explicit" in response.json()["message"]
        # In NONE mode Triton loaded everything at start; the model keeps serving.
        triton = TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL)
        assert [s.state for s in triton.model_states("add_sub")] == ["READY"]
        overview = client.get("/").content.decode()
        assert '<dd id="control-mode">none/poll</dd>' in overview
    finally:
        svc.stop(proc)


def test_a_failed_reload_says_the_previous_version_keeps_serving(tmp_path, settings):
    from repository_app import control

    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(DEMO / "add_sub", repo / "add_sub")
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    proc = svc.start_tritonserver(repo, Path(django_settings.VAR_DIR), ports, tmp_path / "t.log")
    settings.TRITON_URL = f"127.0.0.1:{ports.grpc}"
    try:
        assert control.run_action(servers.default(), "load", "add_sub", "tester").ok
        config = repo / "add_sub" / "config.pbtxt"
        config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: -3"))
        outcome = control.run_action(servers.default(), "reload", "add_sub", "tester")
        assert not outcome.ok
        assert outcome.previous_serving is True
        assert outcome.message.endswith("— the previous version keeps serving.")
        assert outcome.states["state"] == "READY"
        from team.models import AuditEvent

        failed = AuditEvent.objects.get(action="reload", outcome="failed")
        assert failed.username == "tester" and failed.model_name == "add_sub"
        assert "failed to load 'add_sub'" in failed.detail
    finally:
        svc.stop(proc)
