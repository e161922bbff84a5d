"""The web tier under many requests: one Triton client per server per process, so the real
ASGI server's memory stays flat however many requests it serves."""

from __future__ import annotations

import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from .conftest import TritonFixture, WebServer

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REQUESTS = 2000
WARM_UP = 200


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_many_requests_keep_the_web_process_flat(web_server: WebServer, triton: TritonFixture):
    """The models API asks Triton on every request, from a new thread each time (Django's
    ASGI handler): a client per thread had grown the process ~45 KiB and one connection a
    request."""
    pid = web_server.process.pid
    viewer = get_user_model().objects.create_user("wendy-web", password="wendy-password-1")
    token = Token.objects.get_or_create(user=viewer)[0].key
    models = urllib.request.Request(
        f"{web_server.url}/api/v1/models/", headers={"Authorization": f"Token {token}"}
    )

    def get(_: int) -> int:
        with urllib.request.urlopen(models, timeout=60) as answer:
            answer.read()
            return int(answer.status)

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(get, range(WARM_UP))) == {200}
        warm = _rss_mib(pid)
        assert set(pool.map(get, range(REQUESTS))) == {200}
    grown = _rss_mib(pid) - warm
    assert grown < 20, f"the web process grew {grown:.1f} MiB over {REQUESTS} requests"


def test_every_thread_shares_one_grpc_client_per_server(triton: TritonFixture):
    """As Django's ASGI handler does: each call from a thread of its own."""
    from repository_app.triton.client import TritonClient

    client = TritonClient(triton.grpc_url, "")
    threads = [threading.Thread(target=client.is_live) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert client.opened == 1
    client.close()
    assert client.is_live() and client.opened == 2  # reopened after close, once
