"""`/healthz` and the overview against the real services, and with each one down."""

import json

import pytest
from django.test import Client

from devstack.services import free_port

pytestmark = pytest.mark.integration


@pytest.fixture()
def client_logged_in(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def test_healthz_is_200_when_every_component_answers(
    client_logged_in, triton, celery_worker, redis_db
):
    # Signed-in callers get the details; anonymous ones only up/down (test_security_web).
    response = client_logged_in.get("/healthz")
    body = json.loads(response.content)
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    components = body["components"]
    assert set(components) == {"database", "redis", "worker", "triton"}
    assert all(c["up"] for c in components.values())
    assert components["triton"]["info"]["version"] == "2.51.0"
    assert components["triton"]["info"]["model_control_mode"] == "explicit"
    assert components["triton"]["info"]["live"] is True
    assert components["triton"]["info"]["ready"] is True
    assert components["worker"]["info"]["workers"]


def test_healthz_is_503_with_json_when_triton_is_down(client_logged_in, settings, triton):
    port = free_port()
    settings.TRITON_URL = f"127.0.0.1:{port}"
    response = client_logged_in.get("/healthz")
    assert response.status_code == 503
    body = json.loads(response.content)
    assert body["status"] == "degraded"
    assert body["components"]["triton"] == {
        "up": False,
        "detail": f"Triton unreachable at 127.0.0.1:{port}",
        "info": {},
    }
    assert body["components"]["database"]["up"] is True


def test_healthz_is_503_with_json_when_redis_is_down(client_logged_in, settings, triton):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client_logged_in.get("/healthz")
    assert response.status_code == 503
    components = json.loads(response.content)["components"]
    assert components["redis"]["up"] is False
    assert "Redis unreachable" in components["redis"]["detail"]
    assert components["worker"] == {
        "up": False,
        "detail": "unknown: the broker (Redis) is down",
        "info": {},
    }


def test_overview_shows_the_server_and_model_counts(client_logged_in, triton):
    response = client_logged_in.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<dd id="triton-version">2.51.0</dd>' in html
    assert '<dd id="control-mode">explicit</dd>' in html
    assert 'id="models-total"' in html


def test_overview_still_renders_and_says_what_is_down(client_logged_in, settings, triton):
    port = free_port()
    settings.TRITON_URL = f"127.0.0.1:{port}"
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client_logged_in.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert f"Triton is down: Triton unreachable at 127.0.0.1:{port}" in html
    assert "Model states are unknown while Triton is down." in html
    assert "Redis unreachable" in html


def test_overview_requires_login(db):
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_plotly_is_served_from_the_project(db):
    response = Client().get("/static/vendor/plotly.min.js")
    assert response.status_code == 200
    first = (
        b"".join(response.streaming_content)[:200] if response.streaming else response.content[:200]
    )
    assert b"plotly" in first.lower()


def test_triton_stays_up_but_says_not_ready_while_a_model_failed(
    client_logged_in, settings, tmp_path
):
    import shutil
    from pathlib import Path

    from devstack import services as svc
    from triton_api.client import TritonClient, TritonError

    repo = tmp_path / "repo"
    shutil.copytree(
        Path(__file__).parent / "models" / "fails_initialize", repo / "fails_initialize"
    )
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    # Triton's default strict readiness: one failed model makes the server "not ready".
    proc = svc.start_tritonserver(repo, Path(settings.VAR_DIR), ports, tmp_path / "t.log")
    settings.TRITON_URL = f"127.0.0.1:{ports.grpc}"
    try:
        with pytest.raises(TritonError):
            TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL).load("fails_initialize")
        response = client_logged_in.get("/healthz")
        triton_health = json.loads(response.content)["components"]["triton"]
        assert triton_health["up"] is True
        assert triton_health["info"]["ready"] is False
        assert (
            triton_health["detail"] == "live, not ready (a model failed to load, or still loading)"
        )
    finally:
        svc.stop(proc)
