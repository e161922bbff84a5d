"""A websocket client that stops reading during a burst: the real Daphne (dashboard.serve)
disconnects it once WEBSOCKET_MAX_BACKLOG bytes are waiting for it, instead of buffering
every event in memory; a client that keeps up gets every event, and the slow one can
reconnect and resync from the current sequence number."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard import serve
from repository_app import events

from .conftest import ACTIVITY

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

EVENTS = 3000
PAD = "x" * 16_000  # 3000 events x 16 kB: 48 MB for a client that reads nothing


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def stalled_websocket(host: str, port: int, session: str) -> socket.socket:
    """Open /ws/activity/ by hand with a tiny receive buffer, then never read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /ws/activity/ HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: http://{host}:{port}\r\nCookie: sessionid={session}\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)  # byte by byte: leave the frames after the handshake unread
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def drain_until_closed(sock: socket.socket, limit: int, timeout: float) -> tuple[bool, int]:
    """(closed by the server, bytes read) reading at most `limit` bytes."""
    sock.settimeout(1)
    total = 0
    deadline = time.monotonic() + timeout
    while total < limit and time.monotonic() < deadline:
        try:
            chunk = sock.recv(262_144)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True, total
        if not chunk:
            return True, total
        total += len(chunk)
    return False, total


async def test_a_stalled_viewer_is_disconnected_and_memory_stays_bounded(web_server):
    import aiohttp

    user = await sync_to_async(get_user_model().objects.create_user)("sam-slow")
    browser = Client()
    await sync_to_async(browser.force_login)(user)
    session = browser.cookies["sessionid"].value
    parts = urlsplit(web_server.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    pid = web_server.process.pid

    async with aiohttp.ClientSession(cookies={"sessionid": session}) as http:
        fast = await http.ws_connect(
            f"ws://{host}:{port}/ws/activity/", headers={"Origin": web_server.url}
        )
        slow = await asyncio.to_thread(stalled_websocket, host, port, session)
        await asyncio.sleep(0.5)
        before = rss_mib(pid)
        seen: list[int] = []

        async def read_fast() -> None:
            async for message in fast:
                data = json.loads(message.data)
                if data.get("type") == "activity" and "burst" in data:
                    seen.append(data["seq"])
                    if data["burst"] == EVENTS - 1:
                        return

        reader = asyncio.create_task(read_fast())

        def burst() -> list[int]:
            seqs = []
            for i in range(EVENTS):
                event = events.publish(
                    events.ACTIVITY_GROUP, "activity", {**ACTIVITY, "burst": i, "pad": PAD}
                )
                assert event is not None
                seqs.append(event["seq"])
                if i % 100 == 99:
                    # The fast client keeps up by construction, however loaded the machine:
                    # the next 100 go out once it has read these (its channel holds 1000).
                    deadline = time.monotonic() + 60
                    while len(seen) < i + 1 and time.monotonic() < deadline:
                        time.sleep(0.005)
            return seqs

        published = await sync_to_async(burst, thread_sensitive=False)()
        await asyncio.wait_for(reader, timeout=60)
        growth = rss_mib(pid) - before

        # The client that kept up got every event, in order, without a hole.
        assert seen == published
        # The stalled one was cut off near the limit: far less than the 48 MB burst reached
        # it (the kernel's socket buffers hold a few MB more than Daphne's backlog).
        closed, got = await asyncio.to_thread(
            drain_until_closed, slow, EVENTS * len(PAD), timeout=120
        )
        slow.close()
        assert closed, f"still open after {got} bytes"
        assert got < EVENTS * len(PAD) / 2, got
        # Daphne did not keep the burst for it (unbounded, this is about +48 MiB).
        assert growth < serve.WEBSOCKET_MAX_BACKLOG / 2**20 + 16, f"RSS grew {growth:.1f} MiB"

        # Reconnecting works; the resync point is where live events continue.
        again = await http.ws_connect(
            f"ws://{host}:{port}/ws/activity/", headers={"Origin": web_server.url}
        )
        current = await sync_to_async(events.current_seq)(events.ACTIVITY_GROUP)
        assert current == published[-1]
        await sync_to_async(events.publish)(
            events.ACTIVITY_GROUP, "activity", {**ACTIVITY, "burst": -1}
        )
        while True:
            data = json.loads((await again.receive(timeout=60)).data)
            if data.get("burst") == -1:
                assert data["seq"] == current + 1
                break
        await again.close()
        await fast.close()
