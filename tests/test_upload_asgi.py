"""Upload chunks through the real Daphne, where PATCH skips Django (uploads/chunk_asgi.py):
the same authentication, CSRF, offsets and limits as the REST view, byte-exact staging."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import socket
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token

from team.roles import OPERATOR, set_role

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MiB = 1024 * 1024
MODEL = "asgi_chunks"


class Api:
    def __init__(self, base_url: str, **headers: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.headers = headers

    def call(self, method: str, path: str, body: bytes | None = None, **extra: str):  # type: ignore[no-untyped-def]
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers={**self.headers, **extra})
            response = conn.getresponse()
            data = response.read()
            return response.status, dict(response.getheaders()), data
        finally:
            conn.close()

    def patch(self, upload_id: str, data: bytes, offset: int, **extra: str):  # type: ignore[no-untyped-def]
        return self.call(
            "PATCH", f"/api/v1/uploads/{upload_id}/", data,
            **{"Upload-Offset": str(offset), "Content-Type": "application/octet-stream", **extra},
        )  # fmt: skip

    def offset(self, upload_id: str) -> int:
        status, _, body = self.call("GET", f"/api/v1/uploads/{upload_id}/")
        assert status == 200, body
        return json.loads(body)["offset"]


def token_for(user) -> str:  # type: ignore[no-untyped-def]
    return Token.objects.get_or_create(user=user)[0].key


@pytest.fixture()
def cleanup(triton):  # type: ignore[no-untyped-def]
    yield
    shutil.rmtree(triton.repository / MODEL, ignore_errors=True)


def test_chunks_stream_past_django_with_the_apis_auth_offsets_and_limits(
    web_server, triton, cleanup
):
    admin = get_user_model().objects.create_superuser("ash-admin", "", "ash-password-1")
    api = Api(web_server.url, Authorization=f"Token {token_for(admin)}")
    data = os.urandom(3 * MiB + 12345)  # spans several 1 MiB body messages
    status, _, body = api.call(
        "POST", "/api/v1/uploads/",
        json.dumps({"model": MODEL, "new_model": True, "backend": "tensorrt",
                    "filename": "model.plan", "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest()}).encode(),
        **{"Content-Type": "application/json"},
    )  # fmt: skip
    assert status == 201, body
    upload_id = json.loads(body)["id"]
    first = data[: 2 * MiB + 7]

    # Refused before a byte is stored: no credentials, a wrong token, a session without CSRF.
    status, _, body = Api(web_server.url).patch(upload_id, first, 0)
    assert status == 401 and "credentials" in json.loads(body)["message"]
    status, _, body = Api(web_server.url, Authorization="Token nope").patch(upload_id, first, 0)
    assert status == 401 and "token" in json.loads(body)["message"].lower()
    browser = Client()
    browser.force_login(admin)
    session = browser.cookies["sessionid"].value
    status, _, body = Api(web_server.url, Cookie=f"sessionid={session}").patch(upload_id, first, 0)
    assert status == 403 and "CSRF" in json.loads(body)["message"]
    # Someone else's upload does not exist for them.
    olga = get_user_model().objects.create_user("olga-op")
    set_role(olga, OPERATOR)
    status, _, _ = Api(web_server.url, Authorization=f"Token {token_for(olga)}").patch(
        upload_id, first, 0
    )
    assert status == 404
    assert api.offset(upload_id) == 0

    # The browser's way: session cookie plus the CSRF token.
    csrf = "a" * 32
    status, headers, body = Api(
        web_server.url, Cookie=f"sessionid={session}; csrftoken={csrf}", **{"X-CSRFToken": csrf}
    ).patch(upload_id, first, 0)
    assert status == 200, body
    assert headers["Upload-Offset"] == str(len(first)) == str(json.loads(body)["offset"])

    # A repeated chunk (a retry after a lost answer) gets 409 and where to resume.
    status, headers, body = api.patch(upload_id, first, 0)
    assert status == 409 and headers["Upload-Offset"] == str(len(first))
    assert json.loads(body)["expected_offset"] == len(first)
    # The server streams a chunk's body to the application, which answers a wrong offset
    # before 24 MiB can have arrived (it stops reading while 4 MiB wait): the answer comes
    # once the body is read to its end, on a connection kept for the next chunk, as the
    # browser and scripts send them.
    kept = http.client.HTTPConnection(api.host, api.port, timeout=60)
    try:
        for _ in range(2):
            kept.request(
                "PATCH", f"/api/v1/uploads/{upload_id}/", body=b"r" * (24 * MiB),
                headers={**api.headers, "Upload-Offset": "0"},
            )  # fmt: skip
            answer = kept.getresponse()
            assert answer.status == 409 and json.loads(answer.read())["expected_offset"]
            assert not answer.will_close and answer.getheader("Connection") != "close"
    finally:
        kept.close()
    # Over the declared size, a non-numeric offset: refused, offset unchanged.
    status, _, body = api.patch(upload_id, data[len(first) :] + b"x", len(first))
    assert status == 413 and "declared size" in json.loads(body)["message"]
    status, _, body = api.patch(upload_id, b"abc", "ten")  # type: ignore[arg-type]
    assert status == 400 and "Upload-Offset" in json.loads(body)["message"]
    assert api.offset(upload_id) == len(first)

    # A connection dropped halfway through a chunk stores nothing of it.
    with socket.create_connection((api.host, api.port)) as raw:
        raw.sendall(
            f"PATCH /api/v1/uploads/{upload_id}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: {api.headers['Authorization']}\r\nUpload-Offset: {len(first)}\r\n"
            f"Content-Length: {len(data) - len(first)}\r\n\r\n".encode()
            + data[len(first) : len(first) + 1000]
        )
    assert api.offset(upload_id) == len(first)

    status, _, body = api.patch(upload_id, data[len(first) :], len(first))
    assert status == 200, body
    status, _, body = api.call("POST", f"/api/v1/uploads/{upload_id}/complete?wait=1")
    assert status == 201, body
    result = json.loads(body)
    assert result["sha256"] == hashlib.sha256(data).hexdigest() and result["version"] == 1
    assert (triton.repository / MODEL / "1" / "model.plan").read_bytes() == data
