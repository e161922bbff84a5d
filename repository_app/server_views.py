"""The Servers pages: everyone reads the list; Admins add, edit and remove servers through
``server_admin`` (the checks, the permission, the audit)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from . import fleet, server_access, server_admin, servers
from .server_admin import NotAllowed, Refused
from .server_forms import ServerForm
from .server_rules import InvalidServer
from .servers import Server, UnknownServer


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


def _form_page(request: HttpRequest, form: ServerForm, editing: Server | None) -> HttpResponse:
    """The add/edit form again: 400 after a refused POST, 200 on GET."""
    return render(
        request,
        "repository/server_form.html",
        {"form": form, "editing": editing},
        status=400 if request.method == "POST" else 200,
    )


@login_required
@require_http_methods(["GET", "POST"])
def server_new(request: HttpRequest) -> HttpResponse:
    _check(request, "server.add", str(request.POST.get("name", "")))
    form = ServerForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            server = server_admin.create(request.user, form.fields_for_admin())
        except InvalidServer as exc:
            form.refused(exc)
        else:
            messages.info(
                request,
                f"Server {server.name} added. Its health shows once its poller has asked it "
                "(a few seconds while a Celery worker runs).",
            )
            return redirect("server_list")
    return _form_page(request, form, None)


@login_required
@require_http_methods(["GET", "POST"])
def server_edit(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(request, name)
    _check(request, "server.change", name, server)
    if server.from_env:
        messages.error(request, server_admin.FROM_ENV)
        return redirect("server_list")
    form = ServerForm(request.POST or None, editing=server)
    if request.method == "POST" and form.is_valid():
        try:
            _, changed = server_admin.update(request.user, name, form.fields_for_admin())
        except InvalidServer as exc:
            form.refused(exc)
        except (Refused, UnknownServer) as exc:
            messages.error(request, str(exc))
            return redirect("server_list")
        else:
            done = f"{', '.join(changed)} changed" if changed else "nothing changed"
            messages.info(request, f"Server {name}: {done}.")
            return redirect("server_list")
    return _form_page(request, form, server)


@login_required
@require_http_methods(["GET", "POST"])
def server_remove(request: HttpRequest, name: str) -> HttpResponse:
    """GET: the confirmation (what goes, what stays, what blocks it); POST: remove."""
    server = _server(request, name)
    _check(request, "server.remove", name, server)
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
