"""What no request may do to the web process: exhaust it, read its secrets, or reach it
from another origin. Each test is a reproduced attack; each fails with its fix reverted."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from io import BytesIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.core.handlers.asgi import ASGIRequest
from django.test import Client

from common.origin import SameOriginValidator
from common.redact import redact
from dashboard import health
from dashboard.asgi import websocket_app
from dashboard.routing import websocket_urlpatterns
from registry import servers
from repository_app.editor import form_building, saving
from repository_app.modelconfig import parse_config
from repository_app.uploads.chunk_asgi import handle_chunk

from .test_editor_views import DEMO, config_path

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def repo(tmp_path: Path, settings) -> Path:
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(DEMO, root, ignore=shutil.ignore_patterns("__pycache__"))
    settings.MODEL_REPOSITORY = root
    return root


@pytest.fixture()
def operator(django_user_model) -> Client:
    from team.roles import OPERATOR, set_role

    user = django_user_model.objects.create_user("oscar")
    set_role(user, OPERATOR)
    client = Client()
    client.force_login(user)
    return client


# --- secrets --------------------------------------------------------------------------------


def test_credentials_in_urls_are_masked():
    assert redact("Redis unreachable at redis://:s3cret@10.0.0.1:6379/0: refused") == (
        "Redis unreachable at redis://:**@10.0.0.1:6379/0: refused"
    )
    assert (
        redact("postgres://app:pw@db/x and http://u:p@h/")
        == "postgres://app:**@db/x and http://u:**@h/"
    )
    assert redact("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


@pytest.mark.django_db
def test_healthz_tells_anonymous_callers_only_whether_each_part_is_up(settings, admin_user):
    settings.REDIS_URL = "redis://:hunter2-secret@127.0.0.1:1/0"
    settings.TRITON_URL = "127.0.0.1:1"
    anonymous = Client().get("/healthz")
    assert anonymous.status_code == 503
    body = anonymous.json()
    assert body["status"] == "degraded"
    assert set(body["components"]) == {"database", "redis", "worker", "triton"}
    assert all(set(c) == {"up"} for c in body["components"].values()), body
    signed_in = Client()
    signed_in.force_login(admin_user)
    detailed = signed_in.get("/healthz").content.decode()
    assert "127.0.0.1:1" in detailed and "hunter2-secret" not in detailed
    assert "redis://:**@127.0.0.1:1/0" in detailed
    assert "hunter2-secret" not in health.check_redis().detail


def test_var_and_the_sqlite_database_are_private(tmp_path):
    var = tmp_path / "var"
    code = (
        "import django; django.setup(); from django.db import connection; "
        "connection.cursor().execute('create table t (x int)')"
    )
    env = {**os.environ, "VAR_DIR": str(var), "DJANGO_SETTINGS_MODULE": "dashboard.settings"}
    env.pop("DATABASE_URL", None)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=60)
    assert stat.S_IMODE(var.stat().st_mode) == 0o700
    database = var / "db.sqlite3"
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    for extra in var.glob("db.sqlite3-*"):
        assert stat.S_IMODE(extra.stat().st_mode) & 0o077 == 0, extra


@pytest.mark.django_db
def test_api_404s_do_not_show_the_servers_paths(repo, operator, settings):
    for url in ("/api/v1/models/nothere/config", "/api/v1/models/nothere/versions/"):
        response = operator.get(url)
        assert response.status_code == 404
        assert str(settings.MODEL_REPOSITORY) not in response.content.decode(), url


@pytest.mark.django_db
def test_the_csp_lets_pages_connect_to_their_own_origin_only(admin_user):
    client = Client()
    client.force_login(admin_user)
    policy = client.get("/")["Content-Security-Policy"]
    assert "connect-src 'self';" in policy and "ws:" not in policy and "wss:" not in policy


# --- websockets ---------------------------------------------------------------------------


ALLOWED = [
    (b"127.0.0.1:8080", b"http://127.0.0.1:8080", True),
    (b"127.0.0.1:8080", b"http://127.0.0.1:9999", False),  # another port: another site
    (b"127.0.0.1:8080", b"https://127.0.0.1:8080", False),  # another scheme
    (b"127.0.0.1:8080", b"http://evil.example:8080", False),
    (b"evil.example", b"http://evil.example", False),  # Host outside ALLOWED_HOSTS
    (b"localhost", b"http://localhost:80", True),  # default port written out
    (b"127.0.0.1:8080", b"null", False),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("host", "origin", "accepted"), ALLOWED)
async def test_websockets_need_the_pages_own_scheme_host_and_port(host, origin, accepted, settings):
    settings.CSRF_TRUSTED_ORIGINS = []
    # The validator the ASGI application puts in front of every socket, over the routes
    # (without the session lookup, which needs the database).
    assert isinstance(websocket_app, SameOriginValidator)
    app = SameOriginValidator(URLRouter(websocket_urlpatterns))
    communicator = WebsocketCommunicator(
        app, "/ws/notifications/", headers=[(b"host", host), (b"origin", origin)]
    )
    communicator.scope["user"] = SimpleNamespace(is_authenticated=True, pk=1)
    connected, _ = await communicator.connect()
    assert connected is accepted, (host, origin)
    await communicator.disconnect()


@pytest.mark.django_db
async def test_unknown_socket_paths_and_bad_model_names_are_refused_not_500():
    for path in ("/ws/models/..%2f/", "/ws/models/../", "/ws/nothing/", "/ws/models/a;b/"):
        communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
        communicator.scope["user"] = SimpleNamespace(is_authenticated=True, pk=1)
        connected, code = await communicator.connect()
        assert (connected, code) == (False, 4404), path


@pytest.mark.django_db
def test_the_upload_chunk_fast_path_checks_allowed_hosts():
    scope = {
        "type": "http", "method": "PATCH", "path": "/api/v1/uploads/0/", "query_string": b"",
        "headers": [(b"host", b"evil.example"), (b"content-length", b"1")],
    }  # fmt: skip
    status, body, _ = handle_chunk(ASGIRequest(scope, BytesIO()), "0" * 36, BytesIO(b"x"))  # type: ignore[arg-type]
    assert status == 400 and "host" in body["message"]


# --- request bodies -----------------------------------------------------------------------


@pytest.mark.django_db
def test_an_oversized_body_is_refused_before_any_view_reads_it(operator):
    big = b"a=" + b"x" * (11 * 1024 * 1024)  # over the 10 MiB a form or JSON body may have
    page = Client().post("/accounts/login/", big, content_type="application/x-www-form-urlencoded")
    # The message names the setting that would raise the limit: for a form, not the 16 MiB
    # REQUEST_MAX_BODY_BYTES but the 10 MiB a form or JSON body may have.
    assert page.status_code == 413
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE, for forms and JSON" in page.content.decode()
    assert "REQUEST_MAX_BODY_BYTES" not in page.content.decode()
    api = operator.generic("PUT", "/api/v1/models/add_sub/config", big,
                           content_type="application/json")  # fmt: skip
    assert api.status_code == 413 and "over this server's limit" in api.json()["message"]
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in api.json()["message"]
    multipart = Client().post(
        "/accounts/login/",
        b"x" * (17 * 1024 * 1024),
        content_type="multipart/form-data; boundary=b",
    )
    assert multipart.status_code == 413 and "(REQUEST_MAX_BODY_BYTES)" in multipart.content.decode()


@pytest.mark.django_db
def test_a_2_5_mb_text_mode_save_gets_the_editors_message(repo, operator):
    before = config_path(repo).read_bytes()
    current = saving.read_current("add_batched", servers.default())
    text = "# " + "x" * 2_700_000 + "\n" + before.decode()  # over Django's default 2.5 MiB
    response = operator.post("/models/add_batched/config/", {
        "mode": "text", "action": "save", "text": text, "base_sha": current.sha256,
    })  # fmt: skip
    assert response.status_code == 422
    assert "over the 1 MiB limit" in response.content.decode()
    assert config_path(repo).read_bytes() == before


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.django_db
def test_deeply_nested_json_is_a_400_naming_the_problem(repo, operator):
    sha = saving.read_current("add_sub", servers.default()).sha256
    for url, method in (("/api/v1/models/add_sub/config", "PUT"), ("/api/v1/sweeps/", "POST")):
        body = (
            '{"text": ' + deep(100_000) + "}"
            if method == "PUT"
            else '{"model": "add_sub", "input_data": ' + deep(100_000) + "}"
        )
        response = operator.generic(method, url, body, content_type="application/json",
                                    HTTP_IF_MATCH=f'"{sha}"')  # fmt: skip
        assert response.status_code == 400, (url, response.content[:200])
        assert "nested deeper than" in response.json()["message"]


@pytest.mark.django_db
def test_a_lone_surrogate_in_a_config_is_a_400_and_nothing_is_saved(repo, operator):
    before = config_path(repo, "add_sub").read_bytes()
    sha = saving.read_current("add_sub", servers.default()).sha256
    body = json.dumps({"text": before.decode() + "# \ud800\n"})
    response = operator.generic("PUT", "/api/v1/models/add_sub/config", body,
                                content_type="application/json", HTTP_IF_MATCH=f'"{sha}"')  # fmt: skip
    assert response.status_code == 400 and "surrogate" in response.json()["message"]
    assert config_path(repo, "add_sub").read_bytes() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("cfg-max_batch_size", str(10**20), "less than or equal to 2147483647"),
     ("input-0-dims", str(2**63), "above 9223372036854775807"),
     ("instance_group-0-count", str(2**31), "less than or equal to 2147483647")],
)  # fmt: skip
def test_form_values_out_of_range_are_refused_on_their_field(repo, operator, field, value, message):
    before = config_path(repo).read_bytes()
    parsed = parse_config(before.decode())
    assert parsed.config is not None
    data = form_building.post_data(form_building.build_forms(parsed.config, "add_batched"))
    data.update({field: value, "mode": "form", "action": "save", "base_text": before.decode(),
                 "base_sha": saving.read_current("add_batched", servers.default()).sha256})  # fmt: skip
    response = operator.post("/models/add_batched/config/", data)
    assert response.status_code == 422, response.status_code
    assert message in response.content.decode()
    assert "Value out of range" not in response.content.decode()
    assert config_path(repo).read_bytes() == before


# --- the real web server ------------------------------------------------------------------


def raw_request(url: str, head: bytes, body: bytes = b"", timeout: float = 20) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head + body)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_daphne_answers_413_to_a_huge_declared_body_without_waiting_for_it(web_server):
    host = web_server.url.removeprefix("http://")
    head = (
        f"POST /accounts/login/ HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {512 * 1024 * 1024}\r\n\r\n"
    ).encode()
    # Only the headers are sent: a server that buffers first would never answer.
    reply = raw_request(web_server.url, head)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"DATA_UPLOAD_MAX_MEMORY_SIZE, for forms and JSON" in reply


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_daphne_stops_a_chunked_body_at_the_limit(web_server):
    host = web_server.url.removeprefix("http://")
    head = (
        f"POST /accounts/login/ HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    block = b"x" * (1024 * 1024)
    chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
    # 12 MiB without a declared length, over the 10 MiB a form may have, then the last chunk.
    reply = raw_request(web_server.url, head, chunk * 12 + b"0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
