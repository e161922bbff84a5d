"""Management commands act as a named dashboard user: checked like a web request, audited."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from .roles import role_of


def active_user(username: str) -> Any:
    """The active user called ``username``; CommandError when there is none (a command
    that acts on several servers checks the permission on each)."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(
            f"no active dashboard user {username!r}: pass --as-user NAME of an existing user"
        )
    return user


def acting_user(username: str, permission: str) -> Any:
    user = active_user(username)
    if not user.has_perm(permission):
        raise CommandError(
            f"user {username!r} (role {role_of(user)}) is not allowed to do this "
            f"(needs {permission})"
        )
    return user
