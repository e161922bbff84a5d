"""How large a request body may be, refused before anything is buffered.

Daphne queues a whole request body in memory before the application reads it (a 512 MiB
POST to the login page took the web process from 155 to 667 MiB before its 403), and
Django parses a form before a view can say "too large". So the limit is applied twice,
with one rule (``body_limit``):

- in the web server (``dashboard.serve``), on the declared Content-Length and on the
  bytes as they arrive: 413 and the connection closed, nothing queued;
- in Django (``RequestSizeMiddleware``, for any other server and the test client),
  before any middleware or view reads the body: 413 with JSON on the API and for
  JSON clients, a page elsewhere.

Upload chunks (PATCH /api/v1/uploads/<id>/) may be up to UPLOAD_MAX_CHUNK_BYTES; every
other request up to REQUEST_MAX_BODY_BYTES (16 MiB: the largest legitimate body is an
8 MiB --input-data document). A body that is not multipart (a form or JSON) is also held
to DATA_UPLOAD_MAX_MEMORY_SIZE (10 MiB), which Django would otherwise answer with a bare 400.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.html import escape

CHUNK_PATH = re.compile(r"^/api/v1/uploads/(?P<id>[0-9a-f-]{36})/$")
MARGIN = 64 * 1024  # headers of multipart parts and the like


def is_chunk(method: str, path: str) -> bool:
    """An upload chunk: its body is streamed to the application, not buffered first."""
    return method == "PATCH" and CHUNK_PATH.match(path) is not None


def body_limit(method: str, path: str, content_type: str = "") -> int:
    if is_chunk(method, path):
        return int(settings.UPLOAD_MAX_CHUNK_BYTES) + MARGIN
    limit = int(settings.REQUEST_MAX_BODY_BYTES)
    if not content_type.lower().startswith("multipart/"):
        limit = min(limit, int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) + MARGIN)
    return limit


def _limit_setting(limit: int) -> str:
    """The setting behind ``limit``, so the message names the one that would raise it."""
    if limit == int(settings.UPLOAD_MAX_CHUNK_BYTES) + MARGIN:
        return "UPLOAD_MAX_CHUNK_BYTES, for upload chunks"
    if limit < int(settings.REQUEST_MAX_BODY_BYTES):
        return "DATA_UPLOAD_MAX_MEMORY_SIZE, for forms and JSON"
    return "REQUEST_MAX_BODY_BYTES"


def too_large_message(size: int | None, limit: int) -> str:
    declared = f"{size / 1_048_576:.1f} MiB" if size is not None else "too large"
    return (
        f"the request body is {declared}, over this server's limit of "
        f"{limit / 1_048_576:.1f} MiB ({_limit_setting(limit)}): nothing was read or stored; "
        "model configs are at most 1 MiB, input data documents 8 MiB, uploads go in chunks"
    )


def too_large_body(size: int | None, limit: int, content_type: str) -> tuple[bytes, bytes]:
    """(content type, body) of a 413 the web server answers itself: a small page for a
    browser's form, JSON for everything else."""
    message = too_large_message(size, limit)
    if content_type.lower().startswith(("application/x-www-form-urlencoded", "multipart/")):
        page = f"<!doctype html><title>Request refused</title><h1>Request refused</h1><p>{escape(message)}</p>"
        return b"text/html; charset=utf-8", page.encode()
    return b"application/json", json.dumps({"message": message, "field": None}).encode()


def wants_json(request: HttpRequest) -> bool:
    """A page for a browser's form submission, JSON for the API and for scripts' bodies
    (the editor's live validation posts text/plain)."""
    form = (request.content_type or "").startswith(
        ("application/x-www-form-urlencoded", "multipart/")
    )
    return (
        request.path.startswith("/api/")
        or "application/json" in request.headers.get("Accept", "")
        or not form
    )


class RequestSizeMiddleware:
    """413 before anything reads a body over ``body_limit`` (see the module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            size = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0
        limit = body_limit(request.method or "", request.path, request.content_type or "")
        if size > limit:
            message = too_large_message(size, limit)
            if wants_json(request):
                return JsonResponse({"message": message, "field": None}, status=413)
            return render(request, "request_error.html", {"message": message}, status=413)
        return self.get_response(request)
