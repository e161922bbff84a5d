"""The effective role of a user on one Triton server: the global role, narrowed.

A narrowing (``models.ServerRole``) names one server or a label ``key=value`` and the role
it narrows to, Viewer or none. The effective role on a server is the lowest of the global
role (``roles.role_of``) and every narrowing that matches the server (its name, or one of
its labels): a narrowing never widens. Superusers are not narrowed. A narrowing concerns
the actions on a server (``SERVER_PERMISSIONS``); managing users is not one of them.

Like ``backends``, this module knows a server by its shape (``name`` and ``labels``), not by
importing the registry; ``registry.server_access`` applies it to the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from common.request_memo import remembered

from . import audit
from .models import ServerRole
from .roles import ADMIN, OPERATOR, ROLE_PERMISSIONS, VIEWER, role_of

NONE = "none"  # no access at all: the server does not exist for the user
SERVER, LABEL = "server", "label"  # what a narrowing names (ServerRole.kind)
NARROWED_ROLES = (VIEWER, NONE)
NARROWINGS_MEMO = "narrowings"  # a user's narrowings, as a request remembers them
_RANK = {NONE: 0, VIEWER: 1, OPERATOR: 2, ADMIN: 3}

# The permissions that are actions on one Triton server: every check of one names the
# server (`user.has_perm(PERMISSION, server)`; tests/test_layout.py holds the code to it).
SERVER_PERMISSIONS = frozenset(
    {
        "repository_app.control_models",
        "profiler_app.run_sweeps",
        "team.upload_models",
        "team.upload_code",
        "team.delete_versions",
    }
)


@dataclass(frozen=True)
class Effective:
    """A user's role on one server, and the narrowing that set it (None: the global role)."""

    role: str
    global_role: str
    by: ServerRole | None = None

    @property
    def narrowed(self) -> bool:
        return self.by is not None

    @property
    def visible(self) -> bool:
        return self.role != NONE

    def sentence(self, server_name: str) -> str:
        """'' when the global role stands; else e.g. "You are a viewer on prod-1 (narrowed
        by env=prod)"."""
        if self.by is None:
            return ""
        what = "a viewer" if self.role == VIEWER else "without access"
        return f"You are {what} on {server_name} (narrowed by {self.by.selector})"


def matches(narrowing: ServerRole, server: Any) -> bool:
    if narrowing.kind == SERVER:
        return bool(narrowing.value == server.name)
    key, _, value = narrowing.value.partition("=")
    return bool((getattr(server, "labels", None) or {}).get(key) == value)


def narrowings_of(user: Any) -> list[ServerRole]:
    """Read on every call (never cached on the user): each step of a long action sees a
    narrowing added meanwhile. A reading request reads them once (common.request_memo)."""
    if not getattr(user, "pk", None):
        return []
    return list(
        remembered(
            (NARROWINGS_MEMO, user.pk),
            lambda: list(ServerRole.objects.filter(user_id=user.pk).order_by("id")),
        )
    )


def effective(user: Any, server: Any, narrowings: Sequence[ServerRole] | None = None) -> Effective:
    """The user's role on ``server``; ``narrowings`` when the caller read them already (one
    query for a list of servers)."""
    if not getattr(user, "is_authenticated", False):
        return Effective(NONE, NONE)
    if user.is_superuser:
        return Effective(ADMIN, ADMIN)
    role = global_role = role_of(user)
    by = None
    for narrowing in narrowings_of(user) if narrowings is None else narrowings:
        if _RANK[narrowing.role] < _RANK[role] and matches(narrowing, server):
            role, by = narrowing.role, narrowing
    return Effective(role, global_role, by)


def permissions_on(user: Any, server: Any, granted: Iterable[str]) -> set[str]:
    """What of ``granted`` (the user's own permissions) holds on ``server``: all of them
    unless a narrowing lowers the role, then only what the lower role grants too."""
    found = effective(user, server)
    if not found.narrowed:
        return set(granted)
    return set(granted) & ROLE_PERMISSIONS.get(found.role, set())


# --- the registry's servers, seen through the narrowings --------------------------------------
# team knows no registry: the registry hands its list of servers over when it starts
# (registry.apps), as it hands over their labels (audit.labels_of).


class NamedServer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


def _no_servers() -> Sequence[NamedServer]:
    return []


known_servers: Callable[[], Sequence[NamedServer]] = _no_servers


def _hides(narrowing: ServerRole, server: Any) -> bool:
    return narrowing.role == NONE and matches(narrowing, server)


def visible(user: Any, server: Any, narrowings: list[ServerRole] | None = None) -> bool:
    """False when a narrowing to none matches the server (none is the lowest role, so the
    global role does not matter); superusers see every server."""
    if getattr(user, "is_superuser", False):
        return True
    found = narrowings_of(user) if narrowings is None else narrowings
    return not any(_hides(n, server) for n in found)


def hidden_names(user: Any) -> set[str]:
    """The names of the servers hidden from the user, removed ones named by a narrowing
    included (their stored sweeps stay hidden too)."""
    if getattr(user, "is_superuser", False):
        return set()
    found = narrowings_of(user)
    if not any(n.role == NONE for n in found):
        return set()
    hidden = {s.name for s in known_servers() if not visible(user, s, found)}
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
