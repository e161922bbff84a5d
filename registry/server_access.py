"""Who may see and act on which Triton server: the narrowed roles (``team.narrowing``)
applied to the registry.

- A server narrowed to none does not exist for the user: ``visible``, ``visible_servers``,
  ``hidden_names`` (for lists of stored rows that name a server: sweeps, searches, audit),
  ``check_visible`` (UnknownServer, the very refusal an unknown name gets).
- ``refusal(user, perm, server, message)``: "" when the user holds ``perm`` on ``server``
  (``user.has_perm(perm, server)``, the one check), else ``message``, followed by the
  narrowing that lowered the role when one did.
- ``repository_refusal``: a write to a model repository (an upload, a config edit, a
  delete) changes it for every server that serves from it, so the permission must hold on
  each of them: a Viewer narrowing on prod holds when the write comes through staging.
- ``server_named``: the server a stored row names (a sweep's, an upload's), or a bare entry
  of that name when it was removed (narrowings by name still apply to it).

``visible``, ``hidden_names``, ``hidden_labels`` and ``hidden_concerns`` are team.narrowing's
(they need nothing of the registry but its list of servers, which it registers there); they
are named here too, where the registry's callers look. Changing narrowings is
team.narrowing_admin's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from team.narrowing import (
    effective,
    hidden_concerns,
    hidden_labels,
    hidden_names,
    narrowings_of,
    visible,
)

from . import servers
from .servers import Server, UnknownServer

__all__ = [
    "allowed_somewhere", "check_visible", "hidden_concerns", "hidden_labels", "hidden_names",
    "note", "refusal", "repository_refusal", "server_named", "visible", "visible_servers",
]  # fmt: skip


def check_visible(user: Any, server: Server) -> Server:
    """``server``, or UnknownServer as if it did not exist."""
    if not visible(user, server):
        raise UnknownServer(server.name)
    return server


def visible_servers(user: Any, among: list[Server] | None = None) -> list[Server]:
    """The servers the user may see (the switcher, the fleet views): one query."""
    found = narrowings_of(user)
    return [s for s in (servers.all() if among is None else among) if visible(user, s, found)]


def allowed_somewhere(user: Any, perm: str) -> bool:
    """Whether ``user`` holds ``perm`` on at least one server they see: what a route checks
    before it reads a body that names the server (then checked on that server)."""
    return any(user.has_perm(perm, s) for s in visible_servers(user))


def server_named(name: str) -> Server:
    """The registry's server called ``name``; for one removed since, a bare entry of that
    name (no labels, no addresses), so that checks on what it left behind still apply."""
    try:
        return servers.get(name)
    except UnknownServer:
        return Server(name=name, grpc_url="", http_url="", metrics_url="", repository=Path())


def note(user: Any, server: Server) -> str:
    """What the model and server pages say when the role on this server is not the global
    one: "You are a viewer on prod-1 (narrowed by env=prod)." ("" otherwise)."""
    sentence = effective(user, server).sentence(server.name)
    return f"{sentence}." if sentence else ""


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def refusal(user: Any, perm: str, server: Server, message: str) -> str:
    """Empty when ``user`` holds ``perm`` on ``server``; else ``message``, and the narrowing
    that lowered the role when one did ("...: you are a viewer on solo (narrowed by ...)")."""
    if user.has_perm(perm, server):
        return ""
    sentence = effective(user, server).sentence(server.name)
    return f"{message}: {_lower_first(sentence)}" if sentence else message


def repository_refusal(user: Any, perm: str, server: Server, message: str) -> str:
    """``refusal`` for a write to ``server``'s repository: it must hold on every server
    that serves from that repository too (the write changes what each of them loads)."""
    first = refusal(user, perm, server, message)
    if first:
        return first
    for other in servers.sharing(server):
        if other.name == server.name or user.has_perm(perm, other):
            continue
        found = effective(user, other)
        if not found.visible:
            where = "a server where your role does not allow it"
        elif found.by is not None:
            where = f"{other.name}, where you are a viewer (narrowed by {found.by.selector})"
        else:
            where = f"{other.name}, where your role does not allow it"
        return f"{message}: this repository is shared with {where}"
    return ""
