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
- ``narrow`` / ``unnarrow``: the Users page's and the CLI's changes, checked and audited.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from team import audit
from team.models import ServerRole
from team.narrowing import (
    LABEL,
    NARROWED_ROLES,
    NONE,
    SERVER,
    effective,
    matches,
    narrowings_of,
)

from . import servers
from .server_rules import DEFAULT, LABEL_RULE, NAME_RULE
from .servers import Server, UnknownServer

__all__ = [
    "NarrowingRefused", "allowed_somewhere", "check_visible", "hidden_concerns", "hidden_labels", "hidden_names", "matched", "narrow", "note",
    "parse_selector", "refusal", "repository_refusal", "server_named", "unnarrow", "user_named",
    "visible", "visible_servers",
]  # fmt: skip


def _hides(narrowing: ServerRole, server: Any) -> bool:
    return narrowing.role == NONE and matches(narrowing, server)


def visible(user: Any, server: Any, narrowings: list[ServerRole] | None = None) -> bool:
    """False when a narrowing to none matches the server (none is the lowest role, so the
    global role does not matter); superusers see every server."""
    if getattr(user, "is_superuser", False):
        return True
    found = narrowings_of(user) if narrowings is None else narrowings
    return not any(_hides(n, server) for n in found)


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


def hidden_names(user: Any) -> set[str]:
    """The names of the servers hidden from the user, removed ones named by a narrowing
    included (their stored sweeps stay hidden too)."""
    if getattr(user, "is_superuser", False):
        return set()
    found = narrowings_of(user)
    if not any(n.role == NONE for n in found):
        return set()
    hidden = {s.name for s in servers.all() if not visible(user, s, found)}
    return hidden | {n.value for n in found if n.role == NONE and n.kind == SERVER}


def hidden_concerns(user: Any) -> frozenset[str]:
    """What hides an audit event from the user (team.audit.visible_events / shown): the
    servers and labels narrowed to none for them."""
    return audit.hidden_tokens(hidden_names(user), hidden_labels(user))


def hidden_labels(user: Any) -> list[str]:
    """The "key=value" labels a narrowing to none hides from the user (none for superusers):
    what a stored record of a server's labels (a rollout's targets) is checked against once
    the server itself may be gone."""
    if getattr(user, "is_superuser", False):
        return []
    return [n.value for n in narrowings_of(user) if n.role == NONE and n.kind == LABEL]


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


# --- managing narrowings (the Users page and `manage.py team`) -------------------------------


class NarrowingRefused(Exception):
    """Nothing was changed; ``message`` says why and ``field`` names the field at fault."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Selector:
    kind: str
    value: str


def parse_selector(server: str = "", label: str = "") -> Selector:
    """One server by name, or one label ``key=value`` (by the registry's own rules)."""
    server, label = (server or "").strip(), (label or "").strip()
    if bool(server) == bool(label):
        raise NarrowingRefused("name one server or one label (key=value), not both", "server")
    if server:
        if server != DEFAULT and not NAME_RULE.fullmatch(server):
            raise NarrowingRefused(
                f"a server name is 1 to 40 lower-case letters, digits and '-', got {server!r}",
                "server",
            )
        return Selector(SERVER, server)
    key, sep, value = label.partition("=")
    if not sep or not LABEL_RULE.fullmatch(key) or not LABEL_RULE.fullmatch(value):
        raise NarrowingRefused(
            "a label is key=value, each 1 to 63 ASCII letters, digits, '_', '.' and '-', "
            f"got {label[:80]!r}",
            "label",
        )
    return Selector(LABEL, f"{key}={value}")


def _role(role: str) -> str:
    for known in NARROWED_ROLES:
        if role.strip().lower() == known.lower():
            return known
    raise NarrowingRefused("a narrowing is to viewer or none", "role")


def matched(narrowing: ServerRole) -> list[str]:
    """The servers the narrowing matches now."""
    return [s.name for s in servers.all() if matches(narrowing, s)]


def _deny(actor: Any, action: str, user: Any, message: str, field: str = "") -> NarrowingRefused:
    audit.record(actor, action, target=user.get_username(), outcome="denied", detail=message)
    return NarrowingRefused(message, field)


def _check_target(actor: Any, action: str, user: Any) -> None:
    if actor is not None and getattr(actor, "pk", None) == user.pk:
        raise _deny(actor, action, user, "you cannot narrow your own account here")
    if user.is_superuser:
        raise _deny(
            actor, action, user,
            f"{user.get_username()} is a superuser: superusers are not narrowed",
        )  # fmt: skip


def narrow(actor: Any, user: Any, *, server: str = "", label: str = "", role: str) -> ServerRole:
    """Narrow ``user``'s role on one server or label to ``role`` (viewer or none): one
    "user.narrow" audit row. A narrowing of the same selector is replaced."""
    selector, chosen = parse_selector(server, label), _role(role)
    _check_target(actor, "user.narrow", user)
    try:
        with transaction.atomic():
            row, _ = ServerRole.objects.update_or_create(
                user=user,
                kind=selector.kind,
                value=selector.value,
                defaults={"role": chosen, "created_by": _name(actor)},
            )
    except IntegrityError as exc:  # a concurrent add of the same selector
        raise NarrowingRefused(f"not saved: {exc}") from None
    matches = matched(row)
    _audit(
        actor, "user.narrow", user, selector, matches,
        f"{selector.value} → {chosen} (matches: {', '.join(matches) or 'no server now'})",
    )  # fmt: skip
    return row


def unnarrow(actor: Any, user: Any, *, server: str = "", label: str = "") -> ServerRole:
    """Remove one narrowing: one "user.unnarrow" audit row. Nobody lifts their own (an Admin
    narrowed by another Admin would otherwise widen herself back)."""
    selector = parse_selector(server, label)
    if actor is not None and getattr(actor, "pk", None) == user.pk:
        raise _deny(actor, "user.unnarrow", user, "you cannot lift a narrowing of your own account")
    row = ServerRole.objects.filter(user=user, kind=selector.kind, value=selector.value).first()
    if row is None:
        raise _deny(
            actor, "user.unnarrow", user,
            f"{user.get_username()} has no narrowing on {selector.value}",
        )  # fmt: skip
    matches = matched(row)
    row.delete()
    _audit(actor, "user.unnarrow", user, selector, matches, f"{selector.value} (was {row.role})")
    return row


def _audit(
    actor: Any, action: str, user: Any, selector: Selector, matches: list[str], detail: str
) -> None:
    """One audit row for a narrowing change: the selector as server or label, what it
    matches now."""
    audit.record(
        actor,
        action,
        target=user.get_username(),
        server=selector.value if selector.kind == SERVER else "",
        servers=matches,
        labels=[selector.value] if selector.kind == LABEL else [],
        detail=detail,
    )


def _name(actor: Any) -> str:
    return str(actor.get_username()) if hasattr(actor, "get_username") else str(actor or "system")


def user_named(username: str) -> Any:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NarrowingRefused(f"no user {username!r}", "username")
    return user
