"""Fault case 1, the missing part: Triton dies WHILE a model is loading.

The load action must end (no stuck thread, nothing left in flight) with a failure that says
Triton went away, the pages must render with the Triton-down banner and never show a stuck
LOADING, and after Triton restarts in explicit mode (nothing loaded) the dashboard shows
the truth and a new load of the same model succeeds.

Parametrized over the two ways `TritonClient.load` can be waiting when Triton dies: inside
the blocking load_model call (client timeout longer than the load), or polling the
repository index after the call's deadline (client timeout shorter than the load).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from django.test import Client

from devstack import services as svc
from registry import servers
from repository_app import control, events
from repository_app.models import ControlAction, ModelIntent
from team.models import AuditEvent
from triton_api.client import TritonClient

from .conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
SLOW_MODEL = Path(__file__).resolve().parent / "models" / "slow_initialize"
MODEL = "slow_initialize"
# The model's initialize is held until the test opens a gate (creates a file), so the kill
# lands while Triton reports LOADING however slow the machine; at most this long.
HOLD_S = 600
# Upper bounds only (they keep a broken run from hanging), never targets.
BOUND_S = 180


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL tritonserver and its process group (Python-backend stubs included)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _start(repo: Path, settings, ports: svc.TritonPorts, log: Path) -> subprocess.Popen:
    return svc.start_tritonserver(repo, Path(settings.VAR_DIR), ports, log)


@pytest.mark.parametrize(
    ("client_timeout_s", "where"),
    [(float(HOLD_S), "in the load call"), (2.0, "while polling the index")],
    ids=["blocking-call", "polling"],
)
def test_triton_killed_mid_load_fails_the_action_clearly_and_recovers_after_restart(
    tmp_path, settings, admin_user, monkeypatch, client_timeout_s, where, actions_here
):
    repo = tmp_path / "repo"
    shutil.copytree(SLOW_MODEL, repo / MODEL)
    model_py = repo / MODEL / "1" / "model.py"
    source = model_py.read_text()
    assert "time.sleep(4)" in source and "import time\n" in source  # what this test rewrites
    gate = tmp_path / "gate"
    hold = (
        f"for _ in range({HOLD_S * 20}):\n"
        f"            if os.path.exists({str(gate)!r}):\n"
        "                break\n"
        "            time.sleep(0.05)"
    )
    model_py.write_text(
        source.replace("import time\n", "import os\nimport time\n").replace("time.sleep(4)", hold)
    )

    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    log = tmp_path / "triton.log"
    proc = _start(repo, settings, ports, log)
    settings.TRITON_URL = f"127.0.0.1:{ports.grpc}"
    settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports.metrics}/metrics"
    settings.MODEL_REPOSITORY = repo
    settings.TRITON_TIMEOUT_S = client_timeout_s
    unreachable = f"Triton unreachable at {settings.TRITON_URL}"

    published: list[tuple[str, dict]] = []
    real_publish = events.publish

    def recording_publish(group, kind, payload, *args, **kwargs):
        if group == events.repository_group("default"):
            published.append((kind, payload))
        return real_publish(group, kind, payload, *args, **kwargs)

    monkeypatch.setattr(events, "publish", recording_publish)
    polling: list[str] = []  # names whose load went past the call's deadline
    real_wait = TritonClient.wait_until_settled

    def spy_wait(self, name):
        polling.append(name)
        return real_wait(self, name)

    monkeypatch.setattr(TritonClient, "wait_until_settled", spy_wait)

    web = Client()
    web.force_login(admin_user)
    direct = TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL, timeout_s=2.0)
    try:
        assert not control.running(servers.default(), MODEL)
        response = web.post(f"/models/{MODEL}/load", HTTP_ACCEPT="application/json")
        assert response.status_code == 202, response.content
        # Its job runs here, as a worker would: this process holds the spies and the Triton.
        worker = threading.Thread(target=actions_here)
        worker.start()

        # Triton is initializing the model, and the dashboard says so.
        wait_for(
            lambda: [s.state for s in direct.model_states(MODEL)] == ["LOADING"],
            BOUND_S,
            "Triton to report LOADING",
        )
        shown = web.get("/models/states.json").json()
        assert shown["models"][MODEL]["state"] == "LOADING"
        if client_timeout_s < HOLD_S:  # past the call's deadline: now polling
            wait_for(lambda: polling, BOUND_S, "the load call to time out and poll the index")
        # Still mid-load when Triton dies: its job runs and holds the model's claim.
        assert ControlAction.objects.get(model=MODEL).state == "running"
        assert control.running(servers.default(), MODEL) == f"load started by {admin_user}"
        assert polling == ([MODEL] if client_timeout_s < HOLD_S else []), where
        assert [s.state for s in direct.model_states(MODEL)] == ["LOADING"]

        _kill_group(proc)

        # The action ends by itself: the load could not have finished (its gate is shut).
        worker.join(BOUND_S)
        assert not worker.is_alive(), f"the load did not end after a kill {where}"
        ended = ControlAction.objects.get(model=MODEL)
        assert (ended.state, ended.ok, ended.message) == ("failed", False, unreachable)
        assert not control.running(servers.default(), MODEL), "its claim was given back"

        failed = AuditEvent.objects.get(action="load", model_name=MODEL)
        assert failed.outcome == AuditEvent.Outcome.FAILED
        assert failed.username == admin_user.username
        assert failed.detail == unreachable, failed.detail
        assert "Traceback" not in failed.detail
        assert not ModelIntent.objects.filter(name=MODEL).exists()  # not a "previous load"

        # What open pages were told: a failure with the same reason, and no LOADING left.
        outcomes = [p for k, p in published if k == "model.action" and p.get("phase") != "started"]
        assert len(outcomes) == 1, outcomes
        assert outcomes[0]["phase"] == "failed" and outcomes[0]["ok"] is False
        assert outcomes[0]["message"] == unreachable
        last_states = [p for k, p in published if k == "models.states"][-1]
        assert last_states["models"][MODEL]["state"] != "LOADING"

        # Triton down: every page renders, with the banner, and nothing claims LOADING.
        states = web.get("/models/states.json")
        assert states.status_code == 200
        triton_down = states.json()["triton"]
        assert triton_down["up"] is False and triton_down["message"] == unreachable
        # States read "unknown (since HH:MM: reason)" while Triton is down, never stale.
        assert triton_down["reason"].startswith("Triton unreachable since ")
        assert MODEL not in states.json()["models"]
        listing = web.get("/models/")
        assert listing.status_code == 200
        html = listing.content.decode()
        assert f'Triton unreachable: <span id="triton-banner-text">{unreachable}' in html
        assert f'data-model="{MODEL}"' in html  # from disk
        assert "LOADING</span>" not in html and "READY</span>" not in html
        assert ">unknown</span>" in html and "Triton unreachable since" in html
        detail = web.get(f"/models/{MODEL}/")
        assert detail.status_code == 200
        assert unreachable in detail.content.decode()
        overview = web.get("/")
        assert overview.status_code == 200
        assert 'id="triton-banner">Triton is down' in overview.content.decode()
        assert web.get("/server/").status_code == 200
        refused = web.post(f"/models/{MODEL}/load", HTTP_ACCEPT="application/json")
        assert refused.status_code == 409 and refused.json()["message"] == unreachable

        # Same ports and repository, explicit mode, nothing loaded: the truth, no phantom.
        proc = _start(repo, settings, ports, log)
        after = wait_for(
            lambda: (r := web.get("/models/states.json").json())["triton"]["up"] and r,
            BOUND_S,
            "the dashboard to see Triton again",
        )
        assert after["models"][MODEL]["state"] == "not loaded", after["models"][MODEL]
        html = web.get("/models/").content.decode()
        assert 'id="triton-banner" class="banner error" hidden' in html
        assert 'id="restore-banner"' not in html  # the failed load is not restored
        assert "LOADING</span>" not in html and "READY</span>" not in html

        # A new load is accepted (not "busy") and ends READY.
        gate.touch()
        response = web.post(f"/models/{MODEL}/load", HTTP_ACCEPT="application/json")
        assert response.status_code == 202, response.content
        assert actions_here() == ["succeeded"]
        loaded = AuditEvent.objects.filter(action="load", model_name=MODEL).first()
        assert loaded.pk != failed.pk
        assert (loaded.outcome, loaded.detail) == ("ok", f"{MODEL} loaded: READY")
        assert web.get("/models/states.json").json()["models"][MODEL]["state"] == "READY"
        assert [s.state for s in direct.model_states(MODEL)] == ["READY"]
        assert ModelIntent.objects.get(name=MODEL).loaded is True
    finally:
        gate.touch()
        _kill_group(proc)
        direct.close()
        wait_for(lambda: not control._inflight, BOUND_S, "no action left in flight")
