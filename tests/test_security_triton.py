"""The role boundary against a real tritonserver: what an Operator tries never reaches
Triton's code loading."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from team.models import AuditEvent
from team.roles import OPERATOR, set_role
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"


def operator_client(django_user_model) -> Client:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user(f"op-{secrets.token_hex(3)}")
    set_role(user, OPERATOR)
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


def test_a_planted_model_name_with_a_shell_command_is_never_sent_to_triton(
    triton, django_user_model
):
    # Triton's Python backend starts its stub through `bash -c` with the model path unquoted:
    # loading this folder would run `touch` in Triton's working directory.
    marker = f"pwned-{secrets.token_hex(4)}"
    name = f"inj$(touch {marker})"
    folder = triton.repository / name
    shutil.copytree(DEMO / "add_sub", folder, ignore=shutil.ignore_patterns("__pycache__"))
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "add_sub"\n', ""))
    triton_cwd = Path(f"/proc/{triton.process.pid}/cwd").resolve()
    client = operator_client(django_user_model)
    try:
        quoted = (
            name.replace("$", "%24").replace("(", "%28").replace(")", "%29").replace(" ", "%20")
        )
        response = client.post(f"/api/v1/models/{quoted}/load?wait=1")
        assert response.status_code == 409, response.content
        assert "invalid model name" in response.json()["message"]
        assert not (triton_cwd / marker).exists()
        states = TritonClient(triton.grpc_url, triton.metrics_url).model_states(name)
        assert not any(s.state for s in states), states  # Triton was never asked
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        (triton_cwd / marker).unlink(missing_ok=True)


def test_a_trial_load_with_execution_env_path_is_refused_before_triton(triton, django_user_model):
    client = operator_client(django_user_model)
    client.force_login(django_user_model.objects.get(username__startswith="op-"))
    config = (triton.repository / "add_sub" / "config.pbtxt").read_text()
    text = config.rstrip() + (
        '\nparameters [ { key: "EXECUTION_ENV_PATH" value: { string_value: '
        '"$$TRITON_MODEL_DIRECTORY/../busy_compute/1" } } ]\n'
    )
    page = client.post("/models/add_sub/config/", {"mode": "text", "action": "try", "text": text})
    assert page.status_code == 200
    assert "only admins" in page.content.decode().lower()
    denied = AuditEvent.objects.get(action="config.save", outcome="denied", model_name="add_sub")
    assert "EXECUTION_ENV_PATH" in denied.detail
