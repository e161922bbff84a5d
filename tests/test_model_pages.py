"""Repository and model pages, and load/unload actions, against the real tritonserver."""

import json
import time

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from repository_app.models import ControlAction, ModelIntent
from triton_api.client import TritonClient

from .conftest import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture()
def operator(django_user_model):
    user = django_user_model.objects.create_user("olivia", password="pw-olivia-1")
    user.user_permissions.add(Permission.objects.get(codename="control_models"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture()
def viewer(django_user_model):
    user = django_user_model.objects.create_user("victor", password="pw-victor-1")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture()
def triton_client(triton):
    return TritonClient(triton.grpc_url, triton.metrics_url)


def _wait_state(client: TritonClient, name: str, state: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = client.model_states(name)
        if states and all(s.state == state for s in states) and not _busy(name):
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} never reached {state}: {client.model_states(name)}")


def _busy(name: str) -> bool:
    from repository_app import control

    with control._inflight_lock:
        return ("default", name) in control._inflight  # (server, model)


def test_the_list_shows_disk_and_triton_state_for_every_model(viewer, triton, triton_client):
    triton_client.load("add_batched")
    try:
        html = viewer.get("/models/").content.decode()
    finally:
        triton_client.unload("add_batched")
    for name in ("add_sub", "add_batched", "busy_compute", "fails_initialize"):
        assert f'data-model="{name}"' in html
    row = html.split('data-model="add_batched"')[1].split("</tr>")[0]
    assert "READY" in row and "python" in row and "1 × KIND_CPU" in row and ">on<" in row
    row = html.split('data-model="add_sub"')[1].split("</tr>")[0]
    # Not serving: never loaded, or loaded and unloaded by an earlier test of the session.
    assert ("not loaded" in row or "unloaded" in row) and ">off<" in row


def test_the_list_filters_by_name_and_state_and_sorts(viewer, triton):
    html = viewer.get("/models/", {"q": "ADD"}).content.decode()
    assert 'data-model="add_sub"' in html and 'data-model="busy_compute"' not in html
    html = viewer.get("/models/", {"state": "READY"}).content.decode()
    assert "No model matches." in html
    html = viewer.get("/models/", {"sort": "name", "dir": "desc"}).content.decode()
    assert html.index('data-model="slow_initialize"') < html.index('data-model="add_sub"')


def test_a_model_folder_with_a_broken_config_is_listed_not_hidden(viewer, triton):
    broken = triton.repository / "zz_broken"
    broken.mkdir()
    (broken / "config.pbtxt").write_bytes(b'name: "zz_broken"\nmax_batch_size: [[[\n')
    try:
        response = viewer.get("/models/")
        assert response.status_code == 200
        html = response.content.decode()
        assert 'data-model="zz_broken"' in html
        assert "config.pbtxt: 2:" in html
        detail = viewer.get("/models/zz_broken/")
        assert detail.status_code == 200
        assert 'id="config-error"' in detail.content.decode()
    finally:
        (broken / "config.pbtxt").unlink()
        broken.rmdir()


def test_the_model_page_shows_config_files_and_statistics(viewer, triton, triton_client):
    triton_client.load("add_sub")
    try:
        html = viewer.get("/models/add_sub/").content.decode()
    finally:
        triton_client.unload("add_sub")
    assert "<code>INPUT0</code></td><td>FP32</td><td>[16]</td>" in html
    assert "<code>model.py</code>" in html
    import hashlib

    digest = hashlib.sha256((triton.repository / "add_sub/1/model.py").read_bytes()).hexdigest()
    assert digest in html
    assert 'id="stats"' in html and "Not loaded: no statistics." not in html


def test_unknown_models_are_404(viewer, triton):
    assert viewer.get("/models/nope/").status_code == 404
    assert viewer.get("/models/..%2F..%2Fetc/").status_code == 404


# The action is a job a Celery worker runs, with its own database connection: commit for real.
@pytest.mark.django_db(transaction=True)
def test_an_operator_loads_and_unloads_and_the_intent_is_remembered(
    operator, triton, triton_client, celery_worker
):
    response = operator.post("/models/add_sub/load", HTTP_ACCEPT="application/json")
    assert response.status_code == 202, response.content
    _wait_state(triton_client, "add_sub", "READY")
    # A job row that a worker of the queues claimed and ended, not a thread of this process.
    wait_for(
        lambda: ControlAction.objects.filter(action="load", state="succeeded").exists(),
        60, "the load's job to end",
    )  # fmt: skip
    job = ControlAction.objects.get(action="load")
    assert (job.ok, job.message) == (True, "add_sub loaded: READY")
    assert job.worker.startswith("test-") and job.worker_host and job.attempts == 1
    assert ModelIntent.objects.get(name="add_sub").loaded is True
    response = operator.post("/models/add_sub/unload", HTTP_ACCEPT="application/json")
    assert response.status_code == 202
    _wait_state(triton_client, "add_sub", "UNAVAILABLE")
    wait_for(
        lambda: ControlAction.objects.filter(action="unload", state="succeeded").exists(),
        60, "the unload's job to end",
    )  # fmt: skip
    assert ModelIntent.objects.get(name="add_sub").loaded is False


def test_a_viewer_cannot_load_and_nothing_changes(viewer, triton, triton_client):
    response = viewer.post("/models/add_sub/load", HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    assert json.loads(response.content)["message"] == "your role cannot load or unload models"
    assert [s.state for s in triton_client.model_states("add_sub")] in ([], ["UNAVAILABLE"])
    assert not ModelIntent.objects.exists()
    html = viewer.get("/models/add_sub/").content.decode()
    assert 'data-action="load" disabled' in html


def test_actions_on_an_unreachable_triton_say_so(operator, settings, triton):
    from devstack.services import free_port

    port = free_port()
    settings.TRITON_URL = f"127.0.0.1:{port}"
    response = operator.post("/models/add_sub/load", HTTP_ACCEPT="application/json")
    assert response.status_code == 409
    assert json.loads(response.content)["message"] == f"Triton unreachable at 127.0.0.1:{port}"
    html = operator.get("/models/").content.decode()
    assert (
        f'Triton unreachable: <span id="triton-banner-text">Triton unreachable at 127.0.0.1:{port}'
        in html
    )
    assert 'data-model="add_sub"' in html  # still listed from disk


def test_the_server_page_renders_metadata_and_says_gpu_metrics_are_absent(viewer, triton):
    html = viewer.get("/server/").content.decode()
    assert '<dd id="server-version">2.51.0</dd>' in html
    assert "<code>model_repository</code>" in html
    assert "This server reports no GPU metrics" in html
    # The project's own Plotly (its content-hashed name once collectstatic ran).
    from django.templatetags.static import static

    assert static("vendor/plotly.min.js") in html
