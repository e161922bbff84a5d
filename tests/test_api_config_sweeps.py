"""Config and sweep endpoints of the REST API: ETag/If-Match, validation, roles, sweeps."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token

from profiler_app.models import Sweep
from team.models import AuditEvent
from team.roles import OPERATOR, VIEWER, set_role

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _client(name: str, role: str) -> Client:
    user = get_user_model().objects.create_user(name)
    set_role(user, role)
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


def test_config_get_put_with_etag_and_412_on_a_stale_etag(triton):
    client = _client("cfg-op", OPERATOR)
    path = triton.repository / "busy_compute" / "config.pbtxt"
    original = path.read_bytes()
    try:
        response = client.get("/api/v1/models/busy_compute/config")
        etag = response["ETag"]
        assert etag == f'"{response.json()["sha256"]}"'
        assert response.json()["text"] == original.decode()
        assert (
            client.get("/api/v1/models/busy_compute/config", HTTP_IF_NONE_MATCH=etag).status_code
            == 304
        )

        changed = original.decode().replace("max_batch_size: 32", "max_batch_size: 16")
        response = client.put(
            "/api/v1/models/busy_compute/config", {"text": changed, "message": "smaller"},
            content_type="application/json", HTTP_IF_MATCH=etag,
        )  # fmt: skip
        assert response.status_code == 200, response.content
        assert path.read_text() == changed  # comments and layout kept exactly
        new_etag = response["ETag"]

        # The old ETag is stale now: 412, nothing written.
        response = client.put(
            "/api/v1/models/busy_compute/config", {"text": original.decode()},
            content_type="application/json", HTTP_IF_MATCH=etag,
        )  # fmt: skip
        assert response.status_code == 412
        assert response.json()["field"] == "If-Match"
        assert path.read_text() == changed
        assert (
            client.put(
                "/api/v1/models/busy_compute/config",
                {"text": changed},
                content_type="application/json",
            ).status_code
            == 428
        )

        # An invalid config: 422 naming the line, nothing written.
        bad = changed.replace(
            "max_queue_delay_microseconds: 200",
            "preferred_batch_size: [ 64 ] max_queue_delay_microseconds: 200",
        )
        response = client.put(
            "/api/v1/models/busy_compute/config", {"text": bad},
            content_type="application/json", HTTP_IF_MATCH=new_etag,
        )  # fmt: skip
        assert response.status_code == 422
        body = response.json()
        assert body["message"].startswith("line ")
        assert any(f["rule"] == "dynamic-batching.preferred-above-max" for f in body["findings"]), (
            body
        )
        assert path.read_text() == changed
        assert (
            AuditEvent.objects.filter(action="config.save", username="cfg-op", outcome="ok").count()
            == 1
        )
    finally:
        path.write_bytes(original)


def test_config_validate_and_viewer_refusal(triton):
    viewer = _client("cfg-viewer", VIEWER)
    response = viewer.post(
        "/api/v1/models/add_sub/config/validate", {"text": "max_batch_size: oops"},
        content_type="application/json",
    )  # fmt: skip
    assert response.status_code == 200
    assert response.json()["ok"] is False
    assert response.json()["findings"][0]["line"] == 1
    path = triton.repository / "add_sub" / "config.pbtxt"
    before = path.read_bytes()
    etag = viewer.get("/api/v1/models/add_sub/config")["ETag"]
    response = viewer.put(
        "/api/v1/models/add_sub/config", {"text": "name: \"add_sub\""},
        content_type="application/json", HTTP_IF_MATCH=etag,
    )  # fmt: skip
    assert response.status_code == 403
    assert path.read_bytes() == before


def test_versions_are_listed_with_files_and_state(triton):
    client = _client("v-reader", VIEWER)
    [version] = client.get("/api/v1/models/add_sub/versions/").json()
    assert version["version"] == 1
    assert [f["path"] for f in version["files"]] == ["model.py"]
    assert len(version["files"][0]["sha256"]) == 64


def test_sweeps_are_created_validated_listed_and_cancelled_through_the_api(triton):
    operator = _client("sw-op", OPERATOR)
    bad_inputs = [
        ({"model": "add_batched", "concurrency_range": "8:1:1"}, "concurrency_range"),
        ({"model": "add_batched", "measurement_interval": 0}, "measurement_interval"),
        ({"model": "add_batched", "batch_size": "many"}, "batch_size"),
        ({}, "model"),
    ]
    for data, field in bad_inputs:
        response = operator.post("/api/v1/sweeps/", data, content_type="application/json")
        assert response.status_code == 400, (data, response.content)
        assert response.json()["field"] == field, (data, response.json())
        assert response.json()["message"]
    assert not Sweep.objects.exists()

    viewer = _client("sw-viewer", VIEWER)
    assert (
        viewer.post(
            "/api/v1/sweeps/", {"model": "add_batched"}, content_type="application/json"
        ).status_code
        == 403
    )
    assert not Sweep.objects.exists()


def test_a_request_rate_sweep_with_its_input_document_through_the_api(
    triton, redis_db, monkeypatch
):
    from profiler_app import jobs
    from triton_api.client import TritonClient

    monkeypatch.setattr(jobs, "dispatch", lambda sweep_id: True)
    TritonClient(triton.grpc_url, triton.metrics_url).load("add_batched")
    operator = _client("sw-rate", OPERATOR)
    body = {
        "model": "add_batched", "mode": "request_rate", "request_rate_range": "100:200:100",
        "request_distribution": "poisson", "max_threads": 2,
        "input_data": {"data": [{"INPUT0": [0.5] * 16}, {"INPUT0": [1.5] * 16}]},
    }  # fmt: skip
    bad = operator.post(
        "/api/v1/sweeps/",
        {**body, "input_data": {"data": [{"INPUT0": [0.5] * 15}]}},
        content_type="application/json",
    )
    assert bad.status_code == 400 and bad.json()["field"] == "input_data_file", bad.json()
    assert "15 values" in bad.json()["message"]
    assert not Sweep.objects.exists()
    created = operator.post("/api/v1/sweeps/", body, content_type="application/json")
    assert created.status_code == 201, created.json()
    params = created.json()["params"]
    assert params["arrival"] == "poisson" and params["max_threads"] == 2
    assert params["input_data"] == body["input_data"]
