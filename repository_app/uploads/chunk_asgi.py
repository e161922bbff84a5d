"""PATCH /api/v1/uploads/<id>/ served straight from ASGI, without Django's request body.

Django reads a whole request body into a spooled temporary file before a view runs; for
upload chunks that is one more copy of every byte (and one more write to disk). This route
authenticates like the REST API (token, or session with CSRF), then streams the body's
messages through ``chunks.append_chunk``, the same function the DRF view calls, in a worker
thread: sha256 and the file writes release the GIL, so they overlap with the server reading
the socket (dashboard.serve hands a chunk's body over as it arrives, not once it is all in).
Everything else about uploads stays in Django (api.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from io import BytesIO
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.settings import api_settings

from common.kept_connection import kept_connection
from common.memory import release_free_memory
from common.request_limits import CHUNK_PATH, is_chunk

from . import chunks
from .staging import UploadError

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def is_chunk_request(scope: Scope) -> bool:
    return scope["type"] == "http" and is_chunk(scope.get("method", ""), scope.get("path", ""))


class BodyStream:
    """A blocking file-like view of the ASGI body messages, for a worker thread."""

    def __init__(self, receive: Receive, loop: asyncio.AbstractEventLoop) -> None:
        self._receive = receive
        self._loop = loop
        self._pending = memoryview(b"")
        self._more = True

    async def _receive_one(self) -> MutableMapping[str, Any]:
        # A coroutine whatever the server's receive returns (Daphne's is an async def,
        # granian's an awaitable object): run_coroutine_threadsafe takes only coroutines.
        return await self._receive()

    def _next_message(self) -> None:
        message = asyncio.run_coroutine_threadsafe(self._receive_one(), self._loop).result()
        if message["type"] == "http.disconnect":
            self._more = False
            raise ConnectionResetError("the client went away during the chunk")
        self._pending = memoryview(message.get("body", b""))
        self._more = bool(message.get("more_body", False))

    async def drain(self) -> None:
        """Take the rest of the body, unread. The web server streams a chunk's body to the
        application as it arrives (dashboard.serve), so an early answer (401, 409, 413) is
        ready while the client still sends: it reads the answer, and keeps its connection
        for the next chunk, once it has sent everything."""
        while self._more:
            message = await self._receive()
            self._more = message["type"] != "http.disconnect" and bool(
                message.get("more_body", False)
            )

    def read(self, size: int = -1) -> bytes | memoryview:
        """Up to ``size`` bytes (all that is left for -1), as views of the messages: no copies
        of the body beyond the one the server queued."""
        if size < 0:
            parts = [bytes(self._pending)]
            while self._more:
                self._next_message()
                parts.append(bytes(self._pending))
            self._pending = memoryview(b"")
            return b"".join(parts)
        while not self._pending and self._more:
            self._next_message()
        block, self._pending = self._pending[:size], self._pending[size:]
        return block


def authenticated_user(request: HttpRequest) -> Any:
    """The API's own authenticators and permission rule: token, or session plus CSRF."""
    from django.contrib.auth import get_user
    from django.contrib.sessions.middleware import SessionMiddleware
    from django.utils.functional import SimpleLazyObject

    SessionMiddleware(lambda r: None).process_request(request)  # type: ignore[arg-type,return-value]
    request.user = SimpleLazyObject(lambda: get_user(request))  # type: ignore[assignment]
    authenticators = [cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    api_request = Request(request, authenticators=authenticators)
    user = api_request.user  # raises AuthenticationFailed / PermissionDenied (CSRF)
    if not (user and user.is_authenticated):
        raise exceptions.NotAuthenticated()
    return user


def handle_chunk(
    request: ASGIRequest, upload_id: str, stream: BodyStream
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, extra headers) for one chunk; runs in a worker thread."""
    with kept_connection():  # a worker thread's, from chunk to chunk
        return _checked_chunk(request, upload_id, stream)


def _checked_chunk(
    request: ASGIRequest, upload_id: str, stream: BodyStream
) -> tuple[int, dict[str, Any], dict[str, str]]:
    from .api import error_parts

    try:
        try:
            request.get_host()  # ALLOWED_HOSTS, as Django's CommonMiddleware checks it
        except DisallowedHost:
            return 400, {"message": "Bad Request: this host name is not allowed", "field": None}, {}
        try:
            request.user = authenticated_user(request)
        except exceptions.APIException as exc:
            return exc.status_code, {"message": str(exc.detail), "field": None}, {}
        offset = request.headers.get("Upload-Offset", request.GET.get("offset", ""))
        length = request.META.get("CONTENT_LENGTH")
        try:
            size = int(length) if length else None
        except ValueError:
            raise UploadError(
                "Content-Length must be a number", 400, field="Content-Length"
            ) from None
        upload = chunks.append_chunk(request.user, upload_id, offset, stream, size)
    except UploadError as exc:
        return error_parts(exc)
    body = {"id": str(upload.id), "offset": upload.received, "size": upload.size}
    return 200, body, {"Upload-Offset": str(upload.received)}


async def chunk_app(scope: Scope, receive: Receive, send: Send) -> None:
    match = CHUNK_PATH.match(scope["path"])
    assert match is not None
    request = ASGIRequest(scope, BytesIO())
    stream = BodyStream(receive, asyncio.get_running_loop())
    # thread_sensitive=False: a chunk must not wait behind other requests' sync views.
    status, body, headers = await sync_to_async(handle_chunk, thread_sensitive=False)(
        request, match["id"], stream
    )
    await stream.drain()
    payload = json.dumps(body).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        *((name.lower().encode(), value.encode()) for name, value in headers.items()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})
    release_free_memory()
