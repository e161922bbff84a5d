"""Production settings, CSP, CSRF, login rate limiting, websocket origins, Triton's key."""

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.routing import websocket_urlpatterns
from devstack import services as svc
from team.models import AuditEvent
from triton_api.client import TritonClient, TritonError

ROOT = Path(__file__).resolve().parent.parent


def test_deploy_checks_pass_with_production_settings():
    env = {
        **os.environ,
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        "DJANGO_ALLOWED_HOSTS": "dashboard.example.com",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wildcard_host_is_refused():
    env = {**os.environ, "DJANGO_ALLOWED_HOSTS": "*"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "DJANGO_ALLOWED_HOSTS must list host names; '*' is not accepted" in result.stderr


@pytest.mark.django_db
def test_pages_carry_a_csp_with_a_fresh_nonce_on_every_inline_script(admin_user):
    client = Client()
    client.force_login(admin_user)
    first = client.get("/")
    second = client.get("/")
    policy = first["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "object-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy and "unsafe-eval" not in policy
    nonce = policy.split("'nonce-")[1].split("'")[0]
    assert nonce != second["Content-Security-Policy"].split("'nonce-")[1].split("'")[0]
    html = first.content.decode()
    inline = html.count("<script nonce=")
    assert inline >= 1 and html.count(f'<script nonce="{nonce}">') == inline
    assert "http://" not in html.split("<body>")[0] and "https://" not in html


@pytest.mark.django_db
def test_posts_without_a_csrf_token_are_refused(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    for path in ("/models/add_sub/load", "/team/users/", "/accounts/password/", "/models/restore"):
        response = client.post(path, {})
        assert response.status_code == 403, path
    assert not AuditEvent.objects.filter(action="load").exists()


@pytest.mark.django_db(transaction=True)
def test_logins_are_rate_limited_per_account(redis_db, settings):
    settings.LOGIN_MAX_FAILURES = 3
    get_user_model().objects.create_user("lena", password="right-password-1")
    client = Client()
    for _ in range(3):
        response = client.post("/accounts/login/", {"username": "lena", "password": "wrong"})
        assert response.status_code == 200
    # Even the right password is refused while locked out.
    response = client.post("/accounts/login/", {"username": "lena", "password": "right-password-1"})
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert AuditEvent.objects.filter(action="login.failed", username="lena").count() == 3
    redis_db.flushdb()
    response = client.post("/accounts/login/", {"username": "lena", "password": "right-password-1"})
    assert response.status_code == 302


@pytest.mark.django_db
async def test_websockets_from_a_foreign_origin_are_refused_at_the_handshake(redis_db):
    from types import SimpleNamespace

    app = AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns))
    for origin, accepted in ((b"http://evil.example", False), (b"http://127.0.0.1:8080", True)):
        communicator = WebsocketCommunicator(app, "/ws/repository/", headers=[(b"origin", origin)])
        communicator.scope["user"] = SimpleNamespace(is_authenticated=True)
        connected, _ = await communicator.connect()
        assert connected is accepted, origin
        await communicator.disconnect()


@pytest.mark.integration
def test_a_key_protected_triton_answers_only_with_the_key(tmp_path, settings):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository" / "add_sub", repo / "add_sub")
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    proc = svc.start_tritonserver(
        repo, Path(settings.VAR_DIR), ports, tmp_path / "t.log",
        extra_args=("--grpc-restricted-protocol=model-repository:dashboard-key=s3cret",),
    )  # fmt: skip
    url, metrics = f"127.0.0.1:{ports.grpc}", f"http://127.0.0.1:{ports.metrics}/metrics"
    try:
        with pytest.raises(TritonError) as caught:
            TritonClient(url, metrics).load("add_sub")
        assert not caught.value.unreachable
        assert "Triton refused the call" in caught.value.message
        assert "TRITON_API_KEY" in caught.value.message
        keyed = TritonClient(url, metrics, api_key=("dashboard-key", "s3cret"))
        assert [s.state for s in keyed.load("add_sub")] == ["READY"]
        assert keyed.server_info().control_mode == "explicit"
    finally:
        svc.stop(proc)
