"""Content-Security-Policy: only the project's own assets, inline scripts by nonce.

connect-src is 'self' alone: CSP Level 3 lets 'self' match ws:/wss: on the page's own host
and port, so the live pages' websockets work and no other host is reachable.

Every page gets a fresh nonce (`{{ csp_nonce }}` in templates); an inline `<script>`
without it does not run. Styles may be inline (Plotly sets them on its SVG). The API's
Swagger page, rendered by drf-spectacular's own template, gets 'unsafe-inline' scripts,
still from this origin only.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = (
    "default-src 'self'; "
    "script-src 'self' {script}; "
    "style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; "
    "font-src 'self' data:; "
    "connect-src 'self'; "
    "object-src 'none'; "
    "base-uri 'self'; "
    "form-action 'self'; "
    "frame-ancestors 'none'"
)
LOOSE_PATHS = ("/api/v1/docs/",)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        nonce = secrets.token_urlsafe(16)
        request.csp_nonce = nonce  # type: ignore[attr-defined]
        response = self.get_response(request)
        loose = request.path.startswith(LOOSE_PATHS)
        script = "'unsafe-inline'" if loose else f"'nonce-{nonce}'"
        response.headers.setdefault("Content-Security-Policy", POLICY.format(script=script))
        return response


def csp_nonce(request: HttpRequest) -> dict[str, str]:
    """Template context processor: `{{ csp_nonce }}` for inline scripts."""
    return {"csp_nonce": getattr(request, "csp_nonce", "")}
