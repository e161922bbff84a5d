"""Management commands act as a named dashboard user: checked like a web request, audited.

A command about one Triton server (``--server``) passes it: the user's role narrowed there
applies (``narrowing``), and a server narrowed to none is refused as if it did not exist.
"""

from __future__ import annotations

import os
from argparse import ArgumentParser
from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from .narrowing import effective
from .roles import role_of, who_can


def add_as_user_argument(parsers: Iterable[ArgumentParser], done_as: str) -> None:
    """``--as-user`` on each of ``parsers``: default $DASHBOARD_CLI_USER, else admin.
    ``done_as`` ends the help's "the dashboard user ..." (e.g. "this is done as")."""
    for p in parsers:
        p.add_argument(
            "--as-user",
            default=os.environ.get("DASHBOARD_CLI_USER", "admin"),
            help=f"the dashboard user {done_as} (checked and audited); "
            "default $DASHBOARD_CLI_USER or admin",
        )


def active_user(username: str) -> Any:
    """The active user called ``username``; CommandError when there is none (a command
    that acts on several servers checks the permission on each)."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(
            f"no active dashboard user {username!r}: pass --as-user NAME of an existing user"
        )
    return user


def acting_user(username: str, permission: str, server: Any = None) -> Any:
    user = active_user(username)
    found = effective(user, server) if server is not None else None
    if found is not None and not found.visible:
        raise CommandError(f"--server: no Triton server named {server.name!r}")
    if not user.has_perm(permission, server):
        narrowed = f": {found.sentence(server.name)}" if found and found.narrowed else ""
        raise CommandError(
            f"user {username!r} (role {role_of(user)}) is not allowed to do this "
            f"({who_can(permission)}){narrowed}"
        )
    return user
