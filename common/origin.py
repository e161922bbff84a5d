"""Websocket handshakes only from this site's own pages.

Channels' AllowedHostsOriginValidator compares the Origin's host name with ALLOWED_HOSTS
and ignores the port, so a page served by anything else on 127.0.0.1 (another dev
server, a user's own tool on port 9999) could open a socket with the signed-in user's
cookie and stream the dashboard's data. Here the Origin must match scheme, host and port
of the handshake itself (its Host header, whose host must be in ALLOWED_HOSTS), as
Django's CSRF check does for forms, or be listed in CSRF_TRUSTED_ORIGINS.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


def _origin_tuple(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return scheme, parts.hostname.lower(), port


def expected_origin(scope: dict[str, Any]) -> tuple[str, str, int] | None:
    """(scheme, host, port) of the site this handshake reached, or None when its Host is not
    one of ALLOWED_HOSTS."""
    host = _header(scope, b"host")
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") == "wss"
    if getattr(settings, "BEHIND_PROXY", False):
        secure = _header(scope, b"x-forwarded-proto").lower() == "https" or secure
    return _origin_tuple("https" if secure else "http", host)


def origin_allowed(scope: dict[str, Any]) -> bool:
    origin = _header(scope, b"origin")
    if not origin:
        return False
    parts = urlsplit(origin)
    given = _origin_tuple(parts.scheme, parts.netloc)
    if given is None:
        return False
    trusted = {
        _origin_tuple(urlsplit(o).scheme, urlsplit(o).netloc) for o in settings.CSRF_TRUSTED_ORIGINS
    }
    return given == expected_origin(scope) or given in trusted


class SameOriginValidator:
    """ASGI middleware: refuse (403 at the handshake) websockets from any other origin."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
