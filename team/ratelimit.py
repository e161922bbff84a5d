"""Login rate limiting: a lockout per username, a pace per client address.

- Per username: LOGIN_MAX_FAILURES failures in LOGIN_LOCKOUT_S lock the account (even the
  right password is refused with 429) until the window ends or a login succeeds.
- Per address: the same count, but past it the address is slowed down, not locked out:
  one password check per LOGIN_ADDRESS_PACE_S, sooner attempts answered 429 unchecked.
  Behind the TLS proxy, or in one office, many people share an address; a lockout there
  would let anyone lock everyone out with a few wrong passwords.

The address is `client_address` (behind DJANGO_BEHIND_PROXY, the proxy's last
X-Forwarded-For entry). Counters live in Redis with an expiry. When Redis is down the
limit is not enforced (logged): pages must keep working without Redis, and Django's
password hashing still makes guessing slow. Logins, failed and successful, are audited
with the address as the target.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, cast

import redis
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME, get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import UsernameField
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _

from . import audit
from .client_address import client_address

log = logging.getLogger(__name__)

PACED_MESSAGE = "too many failed logins from your address: wait a second and try again"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)


def _username(request: HttpRequest) -> str:
    """The name authentication looks up, as Django's login form cleans it (UsernameField:
    stripped, then NFKC within the field's length), so a look-alike such as a full-width
    'ｌockme' shares the account's counter; case-folded, so case variants share it too."""
    user_model = get_user_model()
    length = user_model._meta.get_field(user_model.USERNAME_FIELD).max_length
    return str(UsernameField(max_length=length).to_python(request.POST.get("username") or ""))[
        :150
    ].casefold()


def _user_key(request: HttpRequest) -> str:
    return f"dashboard:login-failures:user:{_username(request)}"


def _address_key(request: HttpRequest) -> str:
    return f"dashboard:login-failures:addr:{client_address(request)}"


def _pace_key(request: HttpRequest) -> str:
    return f"dashboard:login-pace:addr:{client_address(request)}"


def lockout_message() -> str:
    minutes = max(1, settings.LOGIN_LOCKOUT_S // 60)
    return f"Too many failed logins for this account: try again in {minutes} minutes."


def refusal(request: HttpRequest) -> str | None:
    """Why this login attempt is refused without checking the password, or None to check it.

    A paced address takes its one check per LOGIN_ADDRESS_PACE_S here (SET NX with an
    expiry), so the caller must check the password when None comes back."""
    try:
        client = _redis()
        # redis-py types sync and async results alike (Awaitable[Any] | Any).
        counts = cast(
            "list[bytes | None]", client.mget([_user_key(request), _address_key(request)])
        )
        user_failures, address_failures = (int(c or 0) for c in counts)
        if user_failures >= settings.LOGIN_MAX_FAILURES:
            return lockout_message()
        if address_failures >= settings.LOGIN_MAX_FAILURES:
            pace_ms = max(1, round(settings.LOGIN_ADDRESS_PACE_S * 1000))
            if not client.set(_pace_key(request), 1, nx=True, px=pace_ms):
                return PACED_MESSAGE
    except (redis.RedisError, OSError) as exc:
        log.warning("login rate limit not checked: %s", exc)
    return None


def record_failure(request: HttpRequest) -> None:
    try:
        pipe = _redis().pipeline()
        for key in (_user_key(request), _address_key(request)):
            pipe.incr(key)
            pipe.expire(key, settings.LOGIN_LOCKOUT_S, nx=True)
        pipe.execute()
    except (redis.RedisError, OSError) as exc:
        log.warning("login failure not counted: %s", exc)


def reset_user(request: HttpRequest) -> None:
    # The address counter stays: one good account behind a shared address must not
    # clear the pace for someone guessing other accounts' passwords from there.
    with contextlib.suppress(redis.RedisError, OSError):
        _redis().delete(_user_key(request))


class RateLimitedLoginView(auth_views.LoginView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        message = refusal(request)
        if message is not None:
            form = self.get_form()
            form.errors.clear()
            form.add_error(None, message)
            response = self.render_to_response(self.get_context_data(form=form))
            response.status_code = 429
            if message == PACED_MESSAGE:
                response["Retry-After"] = str(math.ceil(settings.LOGIN_ADDRESS_PACE_S))
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        record_failure(self.request)
        audit.record(
            (self.request.POST.get("username") or "?")[:150],
            "login.failed",
            target=client_address(self.request),
            outcome="failed",
            detail=self.request.path,
        )
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        reset_user(self.request)
        response = super().form_valid(form)
        audit.record(
            form.get_user(), "login", target=client_address(self.request), detail=self.request.path
        )
        return response


class RateLimitedAdminLoginView(RateLimitedLoginView):
    """/admin/login/ with the admin's form and template, limited and audited like /accounts/login/.

    Mirrors AdminSite.login (Django 5.2), which builds a plain LoginView we cannot swap."""

    authentication_form = AdminAuthenticationForm
    template_name = "admin/login.html"

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "GET" and admin.site.has_permission(request):
            return HttpResponseRedirect(reverse("admin:index", current_app=admin.site.name))
        request.current_app = admin.site.name
        return super().dispatch(request, *args, **kwargs)

    def get_default_redirect_url(self) -> str:
        return reverse("admin:index", current_app=admin.site.name)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        request = self.request
        context.update(
            admin.site.each_context(request),
            title=_("Log in"),
            subtitle=None,
            app_path=request.get_full_path(),
            username=request.user.get_username(),
        )
        if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
            context[REDIRECT_FIELD_NAME] = self.get_default_redirect_url()
        return context
