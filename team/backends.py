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
from django.contrib.auth.models import Permission
from django.db.models import Q, QuerySet

from .narrowing import permissions_on


def is_server(obj: Any) -> bool:
    return hasattr(obj, "name") and hasattr(obj, "labels") and hasattr(obj, "grpc_url")


def all_permissions(user_obj: Any) -> set[str]:
    """ModelBackend's answer (the user's own permissions and their groups'), read in one
    query instead of its two, into the same cache on the user object (``_perm_cache``), so
    ModelBackend, asked after, reads no more. Each upload chunk and each page asks afresh."""
    if not user_obj.is_active or user_obj.is_anonymous:
        return set()
    if not hasattr(user_obj, "_perm_cache"):
        pairs = permissions_of(user_obj).values_list("content_type__app_label", "codename")
        user_obj._perm_cache = {f"{app}.{codename}" for app, codename in pairs.distinct()}
    return user_obj._perm_cache  # type: ignore[no-any-return]


def permissions_of(user_obj: Any) -> QuerySet[Permission]:
    """The permissions ModelBackend grants an active user: all for a superuser, else their
    own and their groups' (a permission may come twice)."""
    perms = Permission.objects.order_by()
    if user_obj.is_superuser:
        return perms
    return perms.filter(Q(user=user_obj.pk) | Q(group__user=user_obj.pk))


class PermissionsInOneQuery(ModelBackend):
    """First in AUTHENTICATION_BACKENDS: answers permission checks without an object from
    ``all_permissions``. It checks no password: ModelBackend, still listed, does, and a
    sign-in session records it, so sessions signed in before stay valid (this one still
    finds a session's user, for sessions that name it: the test client's force_login)."""

    def authenticate(self, request: Any, username: Any = None, password: Any = None, **kwargs: Any) -> None:  # fmt: skip
        return None

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return set() if obj is not None else all_permissions(user_obj)


class ServerPermissionBackend(PermissionsInOneQuery):
    """Object permissions whose object is a Triton server, after ModelBackend in
    AUTHENTICATION_BACKENDS (which authenticates; the first backend answers every check
    without an object). It authenticates no one either."""

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return user_obj.is_active and perm in self.get_all_permissions(user_obj, obj)

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if obj is None or not is_server(obj):
            return set()  # ModelBackend's answer stands
        return permissions_on(user_obj, obj, all_permissions(user_obj))
