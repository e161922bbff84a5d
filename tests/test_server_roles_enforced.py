"""Roles narrowed per server, with real Triton servers: an Operator narrowed to Viewer on
"solo" (by its label role=solo) is refused there and allowed on "default", over the pages,
the REST API and the CLI, with nothing changed on solo; a narrowing to none refuses solo's
websockets at the handshake; an upload to solo is refused at its next chunk once the
narrowing is added mid-upload."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.authtoken.models import Token

from repository_app.models import ModelIntent, Upload
from team import narrowing_admin
from team.models import AuditEvent, ServerRole
from team.roles import ADMIN, OPERATOR, ensure_roles, set_role
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration]
NARROWED = "you are a viewer on solo (narrowed by role=solo)"


def _states(fixture) -> dict[str, str]:  # type: ignore[no-untyped-def]
    index = TritonClient(fixture.grpc_url, fixture.metrics_url).repository_index()
    return {m.name: m.state for m in index}


def _people() -> tuple[User, User]:
    ensure_roles()
    ada = User.objects.create_user("ada", password="pw-narrow-ada-1")
    set_role(ada, ADMIN)
    olga = User.objects.create_user("olga", password="pw-narrow-olga-1")
    set_role(olga, OPERATOR)
    return ada, olga


def _clients(user: User) -> tuple[Client, Client]:
    page = Client()
    page.force_login(user)
    token, _ = Token.objects.get_or_create(user=user)
    return page, Client(HTTP_AUTHORIZATION=f"Token {token.key}")


@pytest.mark.django_db
def test_an_operator_narrowed_to_viewer_on_solo_is_refused_there_and_allowed_on_default(
    triton, triton_solo, solo_server
):
    ada, olga = _people()
    narrowing_admin.narrow(ada, olga, label="role=solo", role="viewer")
    page, api = _clients(olga)
    solo_before = _states(triton_solo)

    # A page action: refused with the message naming the narrowing.
    refused = page.post("/models/add_sub/load?server=solo", HTTP_ACCEPT="application/json")
    assert refused.status_code == 403
    assert refused.json()["message"] == f"your role cannot load or unload models: {NARROWED}"
    detail = page.get("/models/add_sub/", {"server": "solo"}).content.decode()
    assert "You are a viewer on solo (narrowed by role=solo)." in detail
    assert f"your role cannot load or unload models: {NARROWED}" in detail  # the disabled why
    assert "You are a viewer" not in page.get("/models/add_sub/").content.decode()

    # The REST API: 403 on solo (audited as denied, with its server), allowed on default.
    denied = api.post("/api/v1/models/add_sub/load?wait=1&server=solo")
    assert denied.status_code == 403 and NARROWED in denied.json()["message"]
    row = AuditEvent.objects.get(action="load", outcome="denied")
    assert row.server == "solo" and row.username == "olga"
    default_before = _states(triton).get("add_sub")
    try:
        allowed = api.post("/api/v1/models/add_sub/load?wait=1")
        assert allowed.status_code == 200, allowed.content
    finally:
        if default_before != "READY":  # as it was
            assert api.post("/api/v1/models/add_sub/unload?wait=1").status_code == 200

    # The CLI: `triton --server solo load` as olga is refused; on default it would run.
    with pytest.raises(CommandError, match=r"narrowed by role=solo"):
        call_command("triton", "load", "add_sub", "--server", "solo", "--as-user", "olga")

    # Nothing changed on solo.
    assert _states(triton_solo) == solo_before
    assert not ModelIntent.objects.filter(server="solo").exists()
    assert ModelIntent.objects.filter(server="default", name="add_sub").exists()
    assert not AuditEvent.objects.filter(server="solo", outcome="ok").exists()


@pytest.mark.django_db(transaction=True)
async def test_a_none_narrowing_refuses_solos_websockets_at_the_handshake_not_defaults(
    solo_server, redis_db
):
    from asgiref.sync import sync_to_async

    from dashboard.asgi import application

    ada, olga = await sync_to_async(_people)()
    await sync_to_async(narrowing_admin.narrow)(ada, olga, label="role=solo", role="none")

    async def handshake(path: str) -> tuple[bool, int | None]:
        headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
        communicator = WebsocketCommunicator(application, path, headers=headers)
        communicator.scope["user"] = olga
        connected, code = await communicator.connect()
        if connected:
            await communicator.disconnect()
        return connected, code

    for path in ("/ws/repository/?server=solo", "/ws/server/?server=solo",
                 "/ws/models/add_sub/?server=solo", "/ws/editor/add_sub/?server=solo"):  # fmt: skip
        assert await handshake(path) == (False, 4404), path
    assert (await handshake("/ws/repository/"))[0]
    assert (await handshake("/ws/models/add_sub/"))[0]
    # The user's own notifications name no server's events: open whatever the page.
    assert (await handshake("/ws/notifications/?server=solo"))[0]


@pytest.mark.django_db
def test_an_upload_to_solo_is_refused_at_its_next_chunk_once_the_narrowing_is_added(
    triton_solo, solo_server
):
    ada, olga = _people()
    _, api = _clients(olga)
    data = b"\x08\x07onnx-ish bytes" * 150  # never completed: the content is not checked
    created = api.post(
        "/api/v1/uploads/?server=solo",
        {"model": "narrowed_new", "new_model": True, "backend": "onnxruntime",
         "filename": "model.onnx", "size": len(data)},
        content_type="application/json",
    )  # fmt: skip
    assert created.status_code == 201, created.content
    upload_id = created.json()["id"]

    def send(offset: int, end: int):  # type: ignore[no-untyped-def]
        return api.patch(f"/api/v1/uploads/{upload_id}/", data[offset:end],
                         content_type="application/octet-stream",
                         HTTP_UPLOAD_OFFSET=str(offset))  # fmt: skip

    assert send(0, 1000).status_code == 200
    narrowing_admin.narrow(ada, olga, label="role=solo", role="viewer")
    refused = send(1000, len(data))
    assert refused.status_code == 403, refused.content
    assert refused.json()["message"] == (
        f"your role cannot upload models (Operators and Admins can): {NARROWED}"
    )
    # Stored state unchanged: the first chunk only, still receiving, nothing in the repository.
    status = api.get(f"/api/v1/uploads/{upload_id}/").json()
    assert (status["offset"], status["state"]) == (1000, Upload.State.RECEIVING)
    assert not (triton_solo.repository / "narrowed_new").exists()
    # Completing is refused too; narrowed to none, the upload is not there at all; without
    # the narrowing the same upload goes on.
    assert api.post(f"/api/v1/uploads/{upload_id}/complete").status_code == 403
    narrowing_admin.narrow(ada, olga, label="role=solo", role="none")
    assert send(1000, len(data)).status_code == 404
    assert api.get(f"/api/v1/uploads/{upload_id}/").status_code == 404
    assert upload_id not in {u["id"] for u in api.get("/api/v1/uploads/").json()}
    ServerRole.objects.filter(user=olga).delete()
    assert send(1000, len(data)).status_code == 200
    api.delete(f"/api/v1/uploads/{upload_id}/")
