"""An upload chunk's body reaches the application as it arrives (dashboard/serve.py), driven
through Twisted's own HTTP channel on an in-memory transport: no timing, only what was
queued for the application and whether the socket is being read."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport

from dashboard import serve

MiB = 1024 * 1024
CHUNK = "/api/v1/uploads/0b7e1c2a-3f4d-4e5f-8a9b-0c1d2e3f4a5b/"


async def application(scope: Any, receive: Any, send: Any) -> None:  # never run here
    raise AssertionError("the event loop is not run in these tests")


@pytest.fixture()
def server() -> Iterator[serve.DashboardServer]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = serve.DashboardServer(application, endpoints=["tcp:port=0"], signal_handlers=False)
    server.connections = {}
    yield server
    for connection in server.connections.values():
        if "application_instance" in connection:
            connection["application_instance"].cancel()
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    asyncio.set_event_loop(None)


def connect(server: serve.DashboardServer) -> tuple[Any, StringTransport]:
    """Daphne's protocol (which picks HTTP/1.1 here) on an in-memory transport."""
    protocol = serve.BoundedHTTPFactory(server).buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def current(channel: Any) -> Any:
    """The request the channel is receiving or answering."""
    return channel._channel.requests[0]


def head(method: str, path: str, length: int) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()


def queued(channel: Any) -> list[dict[str, Any]]:
    """The messages waiting for the application, taken off its queue."""
    queue = current(channel).application_queue
    messages = []
    while queue is not None and not queue.empty():
        messages.append(queue.get_nowait())
    return messages


def test_a_chunks_application_starts_at_its_headers_and_gets_the_body_as_it_arrives(
    server: serve.DashboardServer,
) -> None:
    channel, _ = connect(server)
    body = bytes(range(256)) * (3 * MiB // 256) + b"tail"
    channel.dataReceived(head("PATCH", CHUNK, len(body)))
    request = current(channel)
    assert request.streamed and "application_instance" in server.connections[request]
    assert queued(channel) == []  # no body yet, and none made up

    channel.dataReceived(body[: MiB + 10])
    first = queued(channel)
    assert [(len(m["body"]), m["more_body"]) for m in first] == [(MiB + 10, True)]
    channel.dataReceived(body[MiB + 10 : 2 * MiB])  # under a message's worth: held
    assert queued(channel) == []
    channel.dataReceived(body[2 * MiB :])
    rest = queued(channel)
    assert rest[-1]["more_body"] is False and all(m["more_body"] for m in rest[:-1])
    assert b"".join(m["body"] for m in first + rest) == body


def test_the_socket_is_not_read_while_the_application_is_behind(
    server: serve.DashboardServer,
) -> None:
    channel, transport = connect(server)
    size = 3 * serve.BODY_QUEUE_LIMIT
    channel.dataReceived(head("PATCH", CHUNK, size))
    sent = 0
    while transport.producerState == "producing" and sent < size:
        channel.dataReceived(b"x" * MiB)
        sent += MiB
    assert transport.producerState == "paused"
    assert sent <= serve.BODY_QUEUE_LIMIT + serve.BODY_MESSAGE_SIZE  # bounded, not the body
    queue = current(channel).application_queue
    taken = 0
    while transport.producerState == "paused":
        taken += len(queue.get_nowait()["body"])  # the application catches up
    assert taken >= serve.BODY_QUEUE_LIMIT // 2


def test_other_bodies_are_still_buffered_before_the_application_starts(
    server: serve.DashboardServer,
) -> None:
    channel, _ = connect(server)
    channel.dataReceived(head("POST", "/api/v1/uploads/", 2 * MiB))
    channel.dataReceived(b"{" * MiB)
    request = current(channel)
    assert not request.streamed and request.application_queue is None
    channel.dataReceived(b"{" * MiB)  # all in: now the application starts, with all of it
    messages = queued(channel)
    assert b"".join(m["body"] for m in messages) == b"{" * 2 * MiB


def test_an_answer_before_the_whole_body_closes_the_connection_once_sent(
    server: serve.DashboardServer,
) -> None:
    channel, transport = connect(server)
    channel.dataReceived(head("PATCH", CHUNK, 2 * MiB) + b"x" * 1000)
    request = current(channel)
    request.handle_reply({"type": "http.response.start", "status": 401, "headers": []})
    request.handle_reply({"type": "http.response.body", "body": b"{}"})
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 401") and b"\r\nconnection: close\r\n" in answer.lower()
    # Closed once the answer is out: the rest of the body is not read as a next request.
    assert transport.disconnecting


def test_a_chunk_read_to_its_end_keeps_the_connection_for_the_next(
    server: serve.DashboardServer,
) -> None:
    channel, transport = connect(server)
    channel.dataReceived(head("PATCH", CHUNK, 10) + b"0123456789")
    request = current(channel)
    assert [m["body"] for m in queued(channel)] == [b"0123456789"]
    request.handle_reply({"type": "http.response.start", "status": 200, "headers": []})
    request.handle_reply({"type": "http.response.body", "body": b"{}"})
    assert not transport.disconnecting and b"connection: close" not in transport.value().lower()
    channel.dataReceived(head("PATCH", CHUNK, 3) + b"abc")
    assert current(channel) is not request and current(channel).streamed
    assert [m["body"] for m in queued(channel)] == [b"abc"]


def test_a_chunk_whose_client_went_silent_is_dropped_and_its_application_told(
    server: serve.DashboardServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel, transport = connect(server)
    channel.dataReceived(head("PATCH", CHUNK, 2 * MiB) + b"x" * MiB)
    request = current(channel)
    queued(channel)
    now = request.last_byte
    monkeypatch.setattr(serve.time, "monotonic", lambda: now + serve.CHUNK_IDLE_S - 1)
    request.check_timeouts()
    assert not transport.disconnecting  # quiet, but not for long enough

    request.paused = True  # the server stopped reading, the client is not to blame
    monkeypatch.setattr(serve.time, "monotonic", lambda: now + serve.CHUNK_IDLE_S + 1)
    request.check_timeouts()
    assert not transport.disconnecting
    request.paused = False
    request.check_timeouts()
    assert transport.disconnecting
    channel.connectionLost(ConnectionDone())  # what the reactor does once it is closed
    assert queued(channel) == [{"type": "http.disconnect"}]
