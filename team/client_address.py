"""The client's address: the socket's peer, or behind the trusted proxy the address it saw.

With DJANGO_BEHIND_PROXY the peer is always the proxy, so every user would share one
address. The proxy appends the address it accepted the connection from to
X-Forwarded-For; that last entry is the only one it vouches for (earlier entries are
whatever the client sent).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    if getattr(settings, "BEHIND_PROXY", False):
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last[:64]
    return str(request.META.get("REMOTE_ADDR", ""))[:64]
