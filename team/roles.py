"""The three roles, as groups with permissions (kept in sync after every migrate)."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.db import transaction

from common.request_memo import remembered

VIEWER, OPERATOR, ADMIN = "Viewer", "Operator", "Admin"
ROLES = (VIEWER, OPERATOR, ADMIN)

OPERATOR_PERMISSIONS = {
    "repository_app.control_models",  # load, unload, reload; edit configs
    "profiler_app.run_sweeps",
    "team.upload_models",
}
ADMIN_PERMISSIONS = OPERATOR_PERMISSIONS | {
    "team.upload_code",
    "team.delete_versions",
    "team.manage_users",
    "team.manage_servers",  # the Triton servers the dashboard manages
    "auth.view_user",
    "auth.add_user",
    "auth.change_user",
    "auth.view_group",
}
ROLE_PERMISSIONS: dict[str, set[str]] = {
    VIEWER: set(),  # reads everything, watches sweeps: any signed-in user may
    OPERATOR: OPERATOR_PERMISSIONS,
    ADMIN: ADMIN_PERMISSIONS,
}


def who_can(permission: str, *, capital: bool = False) -> str:
    """Who holds ``permission``, the way a refusal says it: "Operators and Admins can" or
    "only Admins can" ("Only ..." with ``capital``). Users read role names; a permission's
    codename means nothing to them."""
    if all(permission in ROLE_PERMISSIONS[role] for role in (OPERATOR, ADMIN)):
        return f"{OPERATOR}s and {ADMIN}s can"
    return f"{'Only' if capital else 'only'} {ADMIN}s can"


def _permissions(names: set[str]) -> list[Permission]:
    found = []
    for name in sorted(names):
        app_label, codename = name.split(".", 1)
        permission = Permission.objects.filter(
            content_type__app_label=app_label, codename=codename
        ).first()
        if permission is not None:  # an app not migrated yet: the next migrate adds it
            found.append(permission)
    return found


def ensure_roles() -> None:
    for role, names in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(_permissions(names))


GROUPS_MEMO = "groups"  # the user's group names, as a request remembers them (role_facts too)


def role_of(user) -> str:  # type: ignore[no-untyped-def]
    """The highest role a user holds (superusers are Admin)."""
    if user.is_superuser:
        return ADMIN
    names = remembered(
        (GROUPS_MEMO, user.pk), lambda: set(user.groups.values_list("name", flat=True))
    )
    for role in (ADMIN, OPERATOR, VIEWER):
        if role in names:
            return role
    return VIEWER


def set_role(user, role: str) -> None:  # type: ignore[no-untyped-def]
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: choose one of {', '.join(ROLES)}")
    # One transaction: the audit signal writes one row for the remove and the add together.
    with transaction.atomic():
        user.groups.remove(*Group.objects.filter(name__in=ROLES))
        user.groups.add(Group.objects.get(name=role))
