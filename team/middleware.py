"""Remember who makes the request, so changes recorded by signals name them."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from . import audit


class AuditActorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        token = audit.set_actor(user if user is not None and user.is_authenticated else None)
        try:
            return self.get_response(request)
        finally:
            audit.reset_actor(token)
