"""The Servers pages: everyone reads the list; Admins add, edit and remove servers through
``server_admin`` (the checks, the permission, the audit)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from registry import server_access, servers
from registry.server_rules import InvalidServer
from registry.servers import Server, UnknownServer

from . import overview as fleet
from . import server_admin
from .server_admin import NotAllowed, Refused
from .server_forms import ServerForm


def _server(request: HttpRequest, name: str) -> Server:
    """The server, or 404 as if it did not exist when the reader's narrowing hides it."""
    try:
        return server_access.check_visible(request.user, servers.get(name))
    except UnknownServer as exc:
        raise Http404(exc.message) from None


def _shares(every: list[Server]) -> dict[str, list[str]]:
    """Per server, the other servers on its repository."""
    keys = {s.name: servers.repository_key(s) for s in every}
    return {
        s.name: [o.name for o in every if o.name != s.name and keys[o.name] == keys[s.name]]
        for s in every
    }


@login_required
@require_GET
def server_list(request: HttpRequest) -> HttpResponse:
    every = server_access.visible_servers(request.user)
    shares = _shares(every)
    return render(
        request,
        "repository/servers.html",
        {
            "rows": [(c, shares[c.name]) for c in fleet.columns(every)],
            "not_watched": fleet.NOT_WATCHED,
            "can_manage": server_admin.allowed(request.user),
        },
    )


def _check(request: HttpRequest, action: str, name: str, server: Server | None = None) -> None:
    """Admins only: a 403 page otherwise (a refused POST is audited as denied)."""
    try:
        if request.method == "POST":
            server_admin.require(request.user, action, name, server)
        elif not server_admin.allowed(request.user, server):
            raise NotAllowed()
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from None


def _managed_server(request: HttpRequest, action: str, name: str) -> Server:
    """The server an Admin edits or removes: 404 first when it is hidden, then `_check`."""
    server = _server(request, name)
    _check(request, action, name, server)
    return server


def _form_page(request: HttpRequest, form: ServerForm, editing: Server | None) -> HttpResponse:
    """The add/edit form again: 400 after a refused POST, 200 on GET."""
    return render(
        request,
        "repository/server_form.html",
        {"form": form, "editing": editing},
        status=400 if request.method == "POST" else 200,
    )


def _form_round(
    request: HttpRequest, form: ServerForm, editing: Server | None, save: Callable[[], str]
) -> HttpResponse:
    """The add/edit round: a valid POST is saved (``save``, its message shown on the list);
    a refused field goes back onto the form, a refused server to the list with why."""
    if request.method == "POST" and form.is_valid():
        try:
            done = save()
        except InvalidServer as exc:
            form.refused(exc)
        except (Refused, UnknownServer) as exc:
            messages.error(request, str(exc))
            return redirect("server_list")
        else:
            messages.info(request, done)
            return redirect("server_list")
    return _form_page(request, form, editing)


@login_required
@require_http_methods(["GET", "POST"])
def server_new(request: HttpRequest) -> HttpResponse:
    _check(request, "server.add", str(request.POST.get("name", "")))
    form = ServerForm(request.POST or None)

    def save() -> str:
        server = server_admin.create(request.user, form.fields_for_admin())
        return (
            f"Server {server.name} added. Its health shows once its poller has asked it "
            "(a few seconds while a Celery worker runs)."
        )

    return _form_round(request, form, None, save)


@login_required
@require_http_methods(["GET", "POST"])
def server_edit(request: HttpRequest, name: str) -> HttpResponse:
    server = _managed_server(request, "server.change", name)
    if server.from_env:
        messages.error(request, server_admin.FROM_ENV)
        return redirect("server_list")
    form = ServerForm(request.POST or None, editing=server)

    def save() -> str:
        _, changed = server_admin.update(request.user, name, form.fields_for_admin())
        done = f"{', '.join(changed)} changed" if changed else "nothing changed"
        return f"Server {name}: {done}."

    return _form_round(request, form, server, save)


@login_required
@require_http_methods(["GET", "POST"])
def server_remove(request: HttpRequest, name: str) -> HttpResponse:
    """GET: the confirmation (what goes, what stays, what blocks it); POST: remove."""
    server = _managed_server(request, "server.remove", name)
    if request.method == "POST":
        try:
            removed = server_admin.remove(request.user, name)
        except (Refused, UnknownServer) as exc:
            messages.error(request, str(exc))
            return redirect("server_list")
        messages.info(request, removed.message)
        return redirect("server_list")
    return render(
        request,
        "repository/server_remove.html",
        {
            "server": server,
            "blockers": [] if server.from_env else server_admin.blockers(name),
            "shares": _shares(server_access.visible_servers(request.user)).get(name, []),
        },
    )
