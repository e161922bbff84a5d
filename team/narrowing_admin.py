"""Changing narrowings, from the Users page and ``manage.py team``: one server by name or
one label, to viewer or none; refused with the field at fault, audited either way. Nobody
narrows or lifts their own, and superusers are never narrowed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from common.server_names import DEFAULT, LABEL_RULE, NAME_RULE

from . import audit
from .models import ServerRole
from .narrowing import LABEL, NARROWED_ROLES, SERVER, known_servers, matches


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
    return [s.name for s in known_servers() if matches(narrowing, s)]


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
