"""A load that fails because the server lacks the model's backend is explained, in one
place (control.run_action), for the pages, the API and the audit log alike."""

from __future__ import annotations

import shutil
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token

from registry import servers
from repository_app import control
from team.models import AuditEvent
from team.roles import OPERATOR, set_role
from triton_api.client import TritonClient, TritonError
from triton_api.messages import explain_load_failure, missing_backend

from .test_upload_protocol import ONNX_CONFIG, tiny_onnx

# What tritonserver 2.51 (the nvidia-pytriton build) answers for an ONNX model.
TRITON_251 = (
    "load failed for model 'tiny': version 1 is at UNAVAILABLE state: Invalid argument: "
    "unable to find backend library for backend 'onnxruntime', try specifying runtime on the "
    "model configuration.;\n"
)
MISSING = [
    (TRITON_251, "onnxruntime"),
    ("unable to find 'libtriton_pytorch.so' for model 'm', searched: /opt/b/m/1, /opt/b/pytorch",
     "pytorch"),
    ("failed to load 'm': unable to find backend library 'libtriton_custom.so' for model 'm'",
     "custom"),
    ("unable to find backend library for backend 'tensorrt', try specifying runtime", "tensorrt"),
]  # fmt: skip
NOT_MISSING = [
    "failed to load 'fails_initialize': RuntimeError: deliberate failure",
    "unable to find required entrypoint 'TRITONBACKEND_ModelInstanceExecute' in backend library",
    "Triton unreachable at 127.0.0.1:8001: connection refused",
]


def test_it_names_the_missing_backend_in_each_wording():
    for message, backend in MISSING:
        assert missing_backend(message) == backend, message
        explained = explain_load_failure(message)
        assert explained.startswith(message.rstrip().rstrip(";")), message  # verbatim first
        assert f"This Triton has no {backend} backend" in explained, message
    for message in NOT_MISSING:
        assert missing_backend(message) == "" and explain_load_failure(message) == message


def test_it_says_why_make_run_lacks_it_and_where_it_is():
    explained = explain_load_failure(TRITON_251)
    assert explained == (
        "load failed for model 'tiny': version 1 is at UNAVAILABLE state: Invalid argument: "
        "unable to find backend library for backend 'onnxruntime', try specifying runtime on "
        "the model configuration. This Triton has no onnxruntime backend: the model may be "
        "fine, but this server cannot run it. The tritonserver that `make run` starts (from the "
        "nvidia-pytriton wheel) serves Python models only. NVIDIA's production images "
        "(nvcr.io/nvidia/tritonserver:<yy.mm>-py3, the one docker-compose.yml runs) have it."
    )
    custom = explain_load_failure(MISSING[2][0])
    assert "Install the backend in the server's --backend-directory." in custom
    assert "production images" not in custom


@pytest.mark.django_db
def test_run_action_explains_the_failure_in_its_outcome_and_the_audit_row(monkeypatch):
    client = mock.create_autospec(TritonClient, instance=True)
    client.model_states.return_value = []
    client.load.side_effect = TritonError(TRITON_251)
    monkeypatch.setattr(control, "get_client", lambda *_: client)
    outcome = control.run_action(servers.default(), "load", "tiny", "tester")
    assert outcome.ok is False
    assert "This Triton has no onnxruntime backend" in outcome.message
    assert outcome.message.startswith("load failed for model 'tiny'")
    row = AuditEvent.objects.get(action="load", model_name="tiny")
    assert row.outcome == "failed" and row.detail == outcome.message
    assert (
        "This Triton has no onnxruntime backend"
        in control.last_outcomes(servers.default(), ["tiny"])["tiny"]["message"]
    )
    # Unloads keep Triton's words untouched.
    client.unload.side_effect = TritonError("unable to find backend library for backend 'x'")
    assert control.run_action(servers.default(), "unload", "tiny", "tester").message == (
        "unable to find backend library for backend 'x'"
    )


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_api_explains_a_real_tritons_missing_onnxruntime(triton):
    folder = triton.repository / "no_ort_backend"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(tiny_onnx())
    (folder / "config.pbtxt").write_text(ONNX_CONFIG.replace('"plain"', '"no_ort_backend"'))
    user = get_user_model().objects.create_user("ora-op")
    set_role(user, OPERATOR)
    api = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    try:
        response = api.post("/api/v1/models/no_ort_backend/load?wait=1")
        assert response.status_code == 409, response.content
        body = response.json()
        assert body["ok"] is False
        assert "unable to find backend library for backend 'onnxruntime'" in body["message"]
        assert "This Triton has no onnxruntime backend" in body["message"]
        assert "serves Python models only" in body["message"]
        row = AuditEvent.objects.get(action="load", model_name="no_ort_backend")
        assert row.detail == body["message"]
    finally:
        TritonClient(triton.grpc_url, triton.metrics_url).unload("no_ort_backend")
        shutil.rmtree(folder, ignore_errors=True)
