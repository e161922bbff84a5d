"""Permissions on one Triton server: `user.has_perm(PERMISSION, server)`.

Django's ModelBackend answers no permission for an object (it has no object-level rules),
so a check that names a `registry.servers.Server` comes here: the user's permission
as its role grants it, narrowed on that server (`narrowing.permissions_on`: a narrowing to
Viewer or none on the server's name or one of its labels keeps only what that role grants).
This is the one place where a role is narrowed per server or label; every check of an
action on a server passes the server, so that narrowing holds on pages, the API, websockets
and the CLI alike. Superusers never get here (Django grants them everything first).

(`team` imports no other project package: the server is recognised by its shape, a
registry entry with a `name` and `labels`, not by importing the registry.)
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend

from .narrowing import permissions_on


def is_server(obj: Any) -> bool:
    return hasattr(obj, "name") and hasattr(obj, "labels") and hasattr(obj, "grpc_url")


class ServerPermissionBackend(ModelBackend):
    """Object permissions whose object is a Triton server, after ModelBackend in
    AUTHENTICATION_BACKENDS (which authenticates, and answers every check without an
    object). It authenticates no one itself."""

    def authenticate(self, request: Any, username: Any = None, password: Any = None, **kwargs: Any) -> None:  # fmt: skip
        return None

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return user_obj.is_active and perm in self.get_all_permissions(user_obj, obj)

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if obj is None or not is_server(obj):
            return set()  # ModelBackend's answer stands
        return permissions_on(user_obj, obj, ModelBackend.get_all_permissions(self, user_obj))
