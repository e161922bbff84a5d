"""Login rate limiting: a few failures per username and per address, then a pause.

Counters live in Redis with an expiry. When Redis is down the limit is not enforced
(logged): pages must keep working without Redis, and Django's password hashing still
makes guessing slow.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, cast

import redis
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

from . import audit

log = logging.getLogger(__name__)


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)


def _keys(request: HttpRequest) -> list[str]:
    username = (request.POST.get("username") or "").strip().lower()[:150]
    address = request.META.get("REMOTE_ADDR", "")
    return [f"dashboard:login-failures:user:{username}", f"dashboard:login-failures:addr:{address}"]


def locked_out(request: HttpRequest) -> bool:
    try:
        # redis-py types sync and async results alike (Awaitable[Any] | Any).
        counts = cast("list[bytes | None]", _redis().mget(_keys(request)))
    except (redis.RedisError, OSError) as exc:
        log.warning("login rate limit not checked: %s", exc)
        return False
    return any(int(c or 0) >= settings.LOGIN_MAX_FAILURES for c in counts)


def record_failure(request: HttpRequest) -> None:
    try:
        pipe = _redis().pipeline()
        for key in _keys(request):
            pipe.incr(key)
            pipe.expire(key, settings.LOGIN_LOCKOUT_S, nx=True)
        pipe.execute()
    except (redis.RedisError, OSError) as exc:
        log.warning("login failure not counted: %s", exc)


def reset_user(request: HttpRequest) -> None:
    with contextlib.suppress(redis.RedisError, OSError):
        _redis().delete(_keys(request)[0])


class RateLimitedLoginView(auth_views.LoginView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if locked_out(request):
            minutes = max(1, settings.LOGIN_LOCKOUT_S // 60)
            form = self.get_form()
            form.errors.clear()
            form.add_error(
                None,
                f"Too many failed logins for this account or address: try again in {minutes} minutes.",
            )
            response = self.render_to_response(self.get_context_data(form=form))
            response.status_code = 429
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        record_failure(self.request)
        audit.record(
            (self.request.POST.get("username") or "?")[:150],
            "login.failed",
            target=self.request.META.get("REMOTE_ADDR", ""),
            outcome="failed",
        )
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        reset_user(self.request)
        return super().form_valid(form)
