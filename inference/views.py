"""The Try page of a model (``/models/<name>/try/``): a form built from what Triton
serves, sent through the API (static/js/try.js), the outputs shown and offered whole."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from registry import server_access
from registry.server_context import server_of
from repository_app.control import CONTROL_PERMISSION
from repository_app.naming import InvalidModelName, check_model_name
from triton_api.client import TritonError

from . import tracing, trying
from .api import CANNOT_TRACE, CANNOT_TRY
from .tensors import MODES


def _named_or_404(name: str) -> None:
    try:
        check_model_name(name)
    except InvalidModelName as exc:
        raise Http404(str(exc)) from None


@login_required
@require_GET
def try_page(request: HttpRequest, name: str) -> HttpResponse:
    _named_or_404(name)
    server = server_of(request)
    try:
        io = trying.model_io(server, name)
        error = ""
    except TritonError as exc:
        io, error = None, exc.message
    return render(
        request,
        "inference/try.html",
        {
            "name": name,
            "io": io,
            "io_json": io.as_json() if io else None,
            "triton_error": error,
            "refused": server_access.refusal(request.user, CONTROL_PERMISSION, server, CANNOT_TRY),
            "modes": MODES,
        },
    )


@login_required
@require_GET
def trace_page(request: HttpRequest, name: str) -> HttpResponse:
    """Trace the model's next requests and see each one's timeline (static/js/trace.js)."""
    _named_or_404(name)
    server = server_of(request)
    return render(
        request,
        "inference/trace.html",
        {
            "name": name,
            "refused": server_access.refusal(
                request.user, CONTROL_PERMISSION, server, CANNOT_TRACE
            ),
            "max_count": tracing.MAX_COUNT,
            "max_minutes": settings.TRACE_MAX_MINUTES,
        },
    )
