"""Which servers a rollout acts on, chosen one of three ways: every server on the repository
a server serves from (``servers.sharing``), a label ``k=v``, or a hand-picked list.

``choose`` is the one entry for the rollout page, the API and the CLI: it resolves the
choice now (servers in the registry's order, ``default`` first) and says how they were
chosen in words. Given the user, a server narrowed to none for them does not exist here
either (``server_access``): never chosen by a repository or a label, unknown by name. Each refusal names its field (``ChoiceError.field``); an unknown server is
``ChoiceError.unknown`` (the API's 404).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry import server_access, servers
from registry.server_rules import LABEL_RULE
from registry.servers import Server, UnknownServer

KINDS = ("repository", "label", "servers")
MAX_SERVERS = 100


class ChoiceError(ValueError):
    """The choice of servers is refused; ``field`` names the field at fault (None: the
    choice as a whole), ``unknown`` is True for a server name the registry lacks."""

    def __init__(self, field: str | None, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.unknown = unknown


@dataclass(frozen=True)
class Choice:
    kind: str
    servers: list[Server]
    described: str  # "every server on repository /models", "label env=prod", "hand-picked: a, b"

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.servers]


def choose(
    *,
    repository_of: object = None,
    label: object = None,
    servers: object = None,
    user: Any = None,
) -> Choice:
    """The servers of exactly one of: ``repository_of`` (a server's name: every server on
    its repository), ``label`` ("k=v") or ``servers`` (a list of names)."""
    given = [
        name
        for name, value in (
            ("repository_of", repository_of),
            ("label", label),
            ("servers", servers),
        )
        if value not in (None, "", [])
    ]
    if len(given) != 1:
        raise ChoiceError(
            None,
            "choose the servers one way: repository_of (every server on that server's "
            "repository), label (k=v) or servers (a list of names)"
            + (f"; got {', '.join(given)}" if given else ""),
        )
    if repository_of not in (None, ""):
        return by_repository(repository_of, user)
    if label not in (None, ""):
        return by_label(label, user)
    return hand_picked(servers, user)


def by_repository(name: object, user: Any = None) -> Choice:
    server = _get("repository_of", name, user)
    return Choice(
        "repository",
        _seen(servers.sharing(server), user),
        f"every server on repository {server.repository}",
    )


def parse_label(value: object) -> tuple[str, str]:
    if not isinstance(value, str) or value.count("=") != 1:
        raise ChoiceError("label", f"a label is NAME=VALUE, e.g. env=prod, got {_shown(value)}")
    key, item = (part.strip() for part in value.split("="))
    for part in (key, item):
        if not LABEL_RULE.fullmatch(part):
            raise ChoiceError(
                "label",
                f"label {_shown(value)}: its name and value are 1 to 63 ASCII letters, "
                "digits, '_', '.' and '-'",
            )
    return key, item


def by_label(value: object, user: Any = None) -> Choice:
    key, item = parse_label(value)
    found = [s for s in _seen(servers.all(), user) if s.labels.get(key) == item]
    if not found:
        raise ChoiceError("label", f"no server has the label {key}={item}")
    return Choice("label", found, f"label {key}={item}")


def hand_picked(names: object, user: Any = None) -> Choice:
    if isinstance(names, str):
        names = [n for n in (part.strip() for part in names.split(",")) if n]
    if not isinstance(names, list | tuple) or not names:
        raise ChoiceError("servers", 'name one server or more, e.g. ["default", "gpu-a"]')
    if len(names) > MAX_SERVERS:
        raise ChoiceError("servers", f"at most {MAX_SERVERS} servers, got {len(names)}")
    bad = next((n for n in names if not isinstance(n, str)), None)
    if bad is not None:
        raise ChoiceError("servers", f"a server name is text, got {_shown(bad)}")
    picked = [_get("servers", n, user) for n in dict.fromkeys(names)]
    order = {name: i for i, name in enumerate(servers.names())}
    picked.sort(key=lambda s: order.get(s.name, len(order)))
    return Choice("servers", picked, "hand-picked: " + ", ".join(s.name for s in picked))


def _get(field: str, name: object, user: Any = None) -> Server:
    if not isinstance(name, str):
        raise ChoiceError(field, f"a server name is text, got {_shown(name)}")
    try:
        server = servers.get(name)
        return server if user is None else server_access.check_visible(user, server)
    except UnknownServer as exc:
        raise ChoiceError(field, exc.message, unknown=True) from None


def _seen(found: list[Server], user: Any) -> list[Server]:
    """`found` without the servers hidden from `user` (all of them without a user)."""
    return found if user is None else server_access.visible_servers(user, found)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"
