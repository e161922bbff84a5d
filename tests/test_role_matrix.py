"""Every role × every action: allowed, or 403 with nothing changed (pages, API, websockets)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.test import Client
from rest_framework.authtoken.models import Token

from dashboard.routing import websocket_urlpatterns
from profiler_app.models import Sweep
from repository_app.models import ConfigRevision, Upload
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, VIEWER, set_role
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROLES = (VIEWER, OPERATOR, ADMIN)
# action -> the roles allowed to do it
ALLOWED = {
    "load": {OPERATOR, ADMIN},
    "save_config": {OPERATOR, ADMIN},
    "start_sweep": {OPERATOR, ADMIN},
    "upload_data": {OPERATOR, ADMIN},
    "upload_code": {ADMIN},
    "delete_version": {ADMIN},
    "manage_users": {ADMIN},
}


def _clients(role: str) -> tuple[Client, Client]:
    user = get_user_model().objects.create_user(f"u-{role.lower()}", password="pw-matrix-12345")
    set_role(user, role)
    page = Client()
    page.force_login(user)
    token, _ = Token.objects.get_or_create(user=user)
    return page, Client(HTTP_AUTHORIZATION=f"Token {token.key}")


def _snapshot(triton) -> dict:
    repo = triton.repository
    return {
        "states": [
            (s.name, s.version, s.state)
            for s in TritonClient(triton.grpc_url, triton.metrics_url).repository_index()
        ],
        "config": (repo / "add_sub" / "config.pbtxt").read_bytes(),
        "versions": sorted(p.name for p in (repo / "add_sub").iterdir()),
        "revisions": ConfigRevision.objects.count(),
        "sweeps": Sweep.objects.count(),
        "uploads": Upload.objects.count(),
        "users": get_user_model().objects.count(),
    }


@pytest.mark.parametrize("role", ROLES)
def test_each_role_can_do_exactly_what_it_should(role, triton, redis_db):
    page, api = _clients(role)
    repo = triton.repository
    spare = repo / "add_sub" / "9"  # a version only the admin may delete
    spare.mkdir()
    shutil.copy2(repo / "add_sub" / "1" / "model.py", spare / "model.py")
    config = repo / "add_sub" / "config.pbtxt"
    original_config = config.read_bytes()
    triton_client = TritonClient(triton.grpc_url, triton.metrics_url)
    try:
        for action, allowed_roles in ALLOWED.items():
            allowed = role in allowed_roles
            # Reading the config first records it as the first revision: not the action's doing.
            etag = api.get("/api/v1/models/add_sub/config")["ETag"]
            before = _snapshot(triton)
            if action == "load":
                response = api.post("/api/v1/models/add_sub/load?wait=1")
                ok_status = 200
            elif action == "save_config":
                text = original_config.decode().replace("max_batch_size: 8", "max_batch_size: 6")
                response = api.put(
                    "/api/v1/models/add_sub/config", {"text": text},
                    content_type="application/json", HTTP_IF_MATCH=etag,
                )  # fmt: skip
                ok_status = 200
            elif action == "start_sweep":
                response = api.post(
                    "/api/v1/sweeps/", {"model": "add_sub", "concurrency_range": "1:1:1"},
                    content_type="application/json",
                )  # fmt: skip
                ok_status = 201
            elif action in ("upload_data", "upload_code"):
                filename = "model.onnx" if action == "upload_data" else "model.py"
                backend = "onnxruntime" if action == "upload_data" else "python"
                response = api.post(
                    "/api/v1/uploads/",
                    {"model": f"new_{action}", "filename": filename, "size": 10,
                     "new_model": True, "backend": backend},
                    content_type="application/json",
                )  # fmt: skip
                ok_status = 201
            elif action == "delete_version":
                response = api.delete("/api/v1/models/add_sub/versions/9?unload=1")
                ok_status = 200
            else:  # manage_users
                response = page.post(
                    "/team/users/",
                    {"username": "made-by-" + role, "password": "long-enough-pw-1", "role": VIEWER},
                )
                ok_status = 302
            if allowed:
                assert response.status_code == ok_status, (role, action, response.content[:300])
            else:
                assert response.status_code == 403, (role, action, response.status_code)
                body = (
                    response.json()
                    if response["Content-Type"].startswith("application/json")
                    else {}
                )
                assert not body or body.get("message"), (role, action)
                assert _snapshot(triton) == before, (
                    role,
                    action,
                    "state changed on a denied action",
                )
            # Undo what an allowed action did, so the next action starts from the same state.
            if action == "save_config" and allowed:
                config.write_bytes(original_config)
            if action == "start_sweep" and allowed:
                assert api.post(f"/api/v1/sweeps/{response.json()['id']}/cancel").status_code == 200
        # Reading is open to every role.
        for path in ("/", "/models/", "/models/add_sub/", "/server/", "/sweeps/", "/audit/",
                     "/models/add_sub/config/"):  # fmt: skip
            assert page.get(path).status_code == 200, (role, path)
        assert api.get("/api/v1/audit/").status_code == 200
        assert AuditEvent.objects.filter(
            username=f"u-{role.lower()}", outcome="denied"
        ).exists() == (role != ADMIN)
    finally:
        triton_client.unload("add_sub")
        config.write_bytes(original_config)
        shutil.rmtree(spare, ignore_errors=True)


@pytest.mark.parametrize("role", ROLES)
async def test_every_role_may_watch_live_and_anonymous_may_not(role, redis_db):
    app = AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns))
    for path in ("/ws/repository/", "/ws/models/add_sub/", "/ws/activity/", "/ws/server/"):
        communicator = WebsocketCommunicator(app, path, headers=[(b"origin", b"http://127.0.0.1")])
        communicator.scope["user"] = SimpleNamespace(
            is_authenticated=True, pk=1, get_username=lambda: role
        )
        assert (await communicator.connect())[0], (role, path)
        await communicator.disconnect()
        anonymous = WebsocketCommunicator(app, path, headers=[(b"origin", b"http://127.0.0.1")])
        anonymous.scope["user"] = AnonymousUser()
        assert not (await anonymous.connect())[0], path
