"""Where the web server keeps a request body while it arrives (dashboard.serve): an upload
chunk in memory, as the blocks the socket delivered, instead of Twisted's temporary file,
so its bytes are written to disk once (the staged file), not twice; every other large body
in Twisted's temporary file, as before."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from twisted.web.test.requesthelper import DummyChannel

from dashboard import serve

CHUNK_PATH = b"/api/v1/uploads/0f0e0d0c-0b0a-4908-8706-050403020100/"
MiB = 1024 * 1024


def request(method: bytes, path: bytes, content_type: bytes = b"") -> serve.BoundedWebRequest:
    channel = DummyChannel()
    channel._command, channel._path = method, path
    channel.factory = SimpleNamespace(server=SimpleNamespace(protocol_connected=lambda _r: None))
    made = serve.BoundedWebRequest(channel)
    if content_type:
        made.requestHeaders.setRawHeaders(b"content-type", [content_type])
    return made


def daphne_messages(body: object, size: int) -> list[bytes]:
    """What Daphne's process() queues for the application: read(size) until a short one."""
    body.seek(0, 0)  # type: ignore[attr-defined]
    messages = []
    while True:
        message = body.read(size)  # type: ignore[attr-defined]
        messages.append(message)
        if len(message) < size:
            return messages


def test_an_upload_chunk_is_kept_in_memory_and_reaches_the_application_byte_exact() -> None:
    data = os.urandom(3 * MiB + 12_345)
    made = request(b"PATCH", CHUNK_PATH + b"?offset=0")
    made.gotLength(len(data))
    assert isinstance(made.content, serve.ChunkBody)
    # The socket delivers blocks of any size; the application reads 1 MiB messages.
    for start in range(0, len(data), 700_001):
        made.handleContentChunk(data[start : start + 700_001])
    assert made.content.tell() == len(data)
    messages = daphne_messages(made.content, MiB)
    assert [len(m) for m in messages] == [MiB, MiB, MiB, 12_345]
    assert b"".join(messages) == data
    made.content.close()
    assert made.content.closed and made.content.tell() == 0
    assert serve.ChunkBody.held == 0


def test_a_process_keeps_at_most_two_chunks_in_memory_the_rest_wait_on_disk(settings) -> None:  # type: ignore[no-untyped-def]
    # Bodies arrive before authentication: slow senders must not pin memory without bound.
    settings.UPLOAD_MAX_CHUNK_BYTES = 16 * MiB
    made = [request(b"PATCH", CHUNK_PATH) for _ in range(4)]
    for one in made:
        one.gotLength(16 * MiB)
    in_memory = [isinstance(one.content, serve.ChunkBody) for one in made]
    assert in_memory == [True, True, False, False]
    assert serve.ChunkBody.held == 32 * MiB
    made[0].content.close()
    made[0].content.close()  # Twisted may close it on both the finish and the lost connection
    assert serve.ChunkBody.held == 16 * MiB
    later = request(b"PATCH", CHUNK_PATH)
    later.gotLength(None)  # no declared length: the whole chunk limit is promised
    assert isinstance(later.content, serve.ChunkBody)
    for one in (made[1], later):
        one.content.close()
    assert serve.ChunkBody.held == 0


@pytest.mark.parametrize(
    ("method", "path", "content_type"),
    [
        (b"POST", CHUNK_PATH, b"application/octet-stream"),  # uploads are created by POST
        (b"PATCH", b"/api/v1/models/add/config/", b"application/json"),
        (b"POST", b"/models/add/upload/", b"multipart/form-data; boundary=x"),
    ],
)
def test_every_other_large_body_stays_in_twisteds_temporary_file(
    method: bytes, path: bytes, content_type: bytes
) -> None:
    made = request(method, path, content_type)
    made.gotLength(1 * MiB)
    assert not isinstance(made.content, serve.ChunkBody)
    assert hasattr(made.content, "fileno")  # a real (temporary) file


def test_a_chunk_body_is_read_once_from_its_start() -> None:
    body = serve.ChunkBody(8)
    body.write(b"abc")
    body.write(b"defgh")
    assert body.seek(0, 0) == 0
    assert body.read(2) == b"ab" and body.read(4) == b"cdef" and body.read() == b"gh"
    assert body.read(5) == b""
    with pytest.raises(OSError, match="read once"):
        body.seek(3)
