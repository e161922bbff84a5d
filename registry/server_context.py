"""Which Triton server a request is about: ``?server=NAME`` on any page or API call.

- ``ServerMiddleware`` resolves it into ``request.triton_server`` (the default server when
  absent). An unknown name is a 404 with the registry's message: the page for a signed-in
  user, the API's JSON error (``KnownServer``, once DRF has authenticated the caller, so
  that nobody learns server names without signing in). Redirects to this site's own pages
  keep ``server=``, so a POST that redirects back stays on its server.
- ``server_of(request)`` is how views read it (typed; a 404 if it was unknown).
- ``server_context`` gives templates ``current_server`` and ``servers`` (the switcher in
  base.html), ``server_perms`` (``perms`` on the page's server: ``server_perms.team.
  upload_models``) and ``server_role_note`` (the role narrowed here, if it is);
  static/js/servers.js keeps ``server=`` on the page's links, forms and fetches.

A server narrowed to none for the user (``server_access.visible``) is refused exactly as an
unknown name is, everywhere: the middleware for pages, ``KnownServer`` for the API (after
DRF has authenticated a token), ``server_of`` for both; the switcher leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.functional import SimpleLazyObject
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import NotFound
from rest_framework.permissions import BasePermission

from . import server_access, servers
from .servers import Server, UnknownServer

PARAM = "server"
# Every API view takes ?server=NAME (KnownServer: an unknown one is a 404), for its schema.
SERVER_PARAMETER = OpenApiParameter(
    PARAM, str, description="the Triton server (default: the one TRITON_URL names)"
)
_REDIRECTS = (301, 302, 303, 307, 308)


def _resolve(request: Any) -> None:
    name = request.GET.get(PARAM, "")
    request.triton_server_error = ""  # type: ignore[attr-defined]
    if not name:
        request.triton_server = servers.default()  # type: ignore[attr-defined]
        return
    try:
        server = servers.get(name)
        user = getattr(request, "user", None)  # a session's; a token's is checked later
        if user is not None and user.is_authenticated:
            server_access.check_visible(user, server)
        request.triton_server = server  # type: ignore[attr-defined]
    except UnknownServer as exc:
        request.triton_server = None  # type: ignore[attr-defined]
        request.triton_server_error = exc.message  # type: ignore[attr-defined]


def _check_visible(request: Any) -> None:
    """The user the view sees (a DRF request's, once authenticated) may see the server:
    else it is unknown to them. Checked once per request and user."""
    server, user = request.triton_server, getattr(request, "user", None)
    if server is None or user is None or not user.is_authenticated:
        return
    if getattr(request, "triton_server_seen_by", None) == user.pk:
        return
    if server_access.visible(user, server):
        request.triton_server_seen_by = user.pk
    else:
        request.triton_server = None
        request.triton_server_error = UnknownServer(server.name).message


class ServerMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        _resolve(request)
        error = request.triton_server_error  # type: ignore[attr-defined]
        api = request.path.startswith("/api/")
        if error and not api and request.user.is_authenticated:
            return render(
                request, "404.html", {"exception": error, "request_path": request.path}, status=404
            )
        response = self.get_response(request)
        server = request.triton_server  # type: ignore[attr-defined]
        if server is not None and not server.is_default and response.status_code in _REDIRECTS:
            location = response.get("Location", "")
            if _same_site(location, request) and f"{PARAM}=" not in urlsplit(location).query:
                response["Location"] = servers.with_server(location, server)
        return response


def _same_site(location: str, request: HttpRequest) -> bool:
    parts = urlsplit(location)
    if not parts.scheme and not parts.netloc:
        return location.startswith("/") and not location.startswith("//")
    return parts.netloc == request.get_host()


def server_of(request: Any) -> Server:
    """The server a request names (a Django or a DRF request); Http404 for an unknown one."""
    if not hasattr(request, "triton_server"):  # built without the middleware (tests)
        _resolve(request)
    _check_visible(request)
    server = request.triton_server
    if server is None:
        raise Http404(request.triton_server_error)
    return server  # type: ignore[no-any-return]


class KnownServer(BasePermission):
    """The API's check of ``?server=``: after authentication, an unknown name is a 404."""

    def has_permission(self, request: Any, view: Any) -> bool:
        if hasattr(request, "triton_server"):
            _check_visible(request)
        error = getattr(request, "triton_server_error", "")
        if error:
            raise NotFound(error)
        return True


class _ServerPermLookup:
    def __init__(self, user: Any, server: Server, app_label: str) -> None:
        self.user, self.server, self.app_label = user, server, app_label

    def __getitem__(self, codename: str) -> bool:
        return bool(self.user.has_perm(f"{self.app_label}.{codename}", self.server))


class ServerPerms:
    """Django's ``perms``, on one server: ``{% if server_perms.team.upload_models %}``."""

    def __init__(self, user: Any, server: Server) -> None:
        self.user, self.server = user, server

    def __getitem__(self, app_label: str) -> _ServerPermLookup:
        return _ServerPermLookup(self.user, self.server, app_label)


def server_context(request: HttpRequest) -> dict[str, Any]:
    """Template context: the page's server, the servers the user may see (read only when
    a template uses them: the header's switcher), permissions on the page's server and the
    sentence saying when the role is narrowed there."""
    current = getattr(request, "triton_server", None) or servers.default()
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"current_server": current, "servers": SimpleLazyObject(servers.all)}
    return {
        "current_server": current,
        "servers": SimpleLazyObject(lambda: server_access.visible_servers(user)),
        "server_perms": ServerPerms(user, current),
        "server_role_note": SimpleLazyObject(lambda: server_access.note(user, current)),
    }
