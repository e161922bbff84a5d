"""Keep the roles in sync after migrate, audit user and role changes, and revoke the API
token of a user whose password changes (on any path: our page, the admin, changepassword).

The Users page (accounts.py) writes one audit row per action itself and runs its changes
inside ``recorded_by_caller()``, so these signals stay quiet for them; they audit the
changes made elsewhere (the Django admin, the shell, createsuperuser)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import is_password_usable
from django.db import transaction
from django.db.models.signals import m2m_changed, post_migrate, post_save, pre_save
from django.dispatch import receiver

from . import audit, tokens
from .roles import ensure_roles, role_of

_recorded_by_caller: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "team_recorded_by_caller", default=False
)


@contextlib.contextmanager
def recorded_by_caller() -> Iterator[None]:
    """User and role changes made inside are audited by the caller, not by these signals
    (the token revocation of a password change still happens)."""
    token = _recorded_by_caller.set(True)
    try:
        yield
    finally:
        _recorded_by_caller.reset(token)


@receiver(post_migrate)
def sync_roles(sender: Any, **kwargs: Any) -> None:
    # After every app: permissions of apps migrated after this one exist only then.
    ensure_roles()


@receiver(post_save, sender=get_user_model())
def audit_user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if kwargs.get("raw") or _recorded_by_caller.get():
        return
    fields = kwargs.get("update_fields")
    if fields and set(fields) <= {"last_login", "password"}:
        return  # logins and password changes are not role changes
    flags = (
        f"active={instance.is_active} staff={instance.is_staff} superuser={instance.is_superuser}"
    )
    audit.record(
        audit.current_actor(),
        "user.create" if created else "user.change",
        target=instance.get_username(),
        # A new user has no groups yet: its role is Admin for a superuser, else Viewer.
        detail=f"role {role_of(instance)}, {flags}" if created else flags,
    )


@receiver(m2m_changed, sender=get_user_model().groups.through)
def audit_role_change(sender: Any, instance: Any, action: str, **kwargs: Any) -> None:
    """One "user.role" row ("Operator → Admin") per change of role. The admin's groups.set()
    removes and then adds: both land in one transaction, so the row is written when it
    commits, comparing the role before the first change with the role after the last."""
    if _recorded_by_caller.get() or kwargs.get("reverse") or not hasattr(instance, "get_username"):
        return
    if action in ("pre_add", "pre_remove", "pre_clear"):
        # Kept until a commit records it; after a rollback it is still the role in force.
        instance.__dict__.setdefault("_dashboard_role_before", role_of(instance))
    elif action in ("post_add", "post_remove", "post_clear"):
        actor = audit.current_actor()
        transaction.on_commit(lambda: _record_role_change(instance, actor))


def _record_role_change(instance: Any, actor: Any) -> None:
    # The first callback of a commit records the change; the others find nothing left.
    before = instance.__dict__.pop("_dashboard_role_before", None)
    after = role_of(instance)
    if before is not None and before != after:
        audit.record(
            actor, "user.role", target=instance.get_username(), detail=f"{before} → {after}"
        )


@receiver(pre_save, sender=get_user_model())
def note_password_change(sender: Any, instance: Any, **kwargs: Any) -> None:
    fields = kwargs.get("update_fields")
    if (
        kwargs.get("raw")
        or instance.pk is None
        or (fields is not None and "password" not in fields)
    ):
        return
    # set_password() keeps the raw password in _password until save() has run (Django's hook
    # for password validators); the rehash check_password() may do at login clears it before
    # saving, so a login never counts as a change.
    if getattr(instance, "_password", None) is not None:
        instance._dashboard_password_changed = True
    elif not instance.has_usable_password():  # the admin's "disable password-based login"
        old = sender.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
        instance._dashboard_password_changed = old is not None and is_password_usable(old)


@receiver(post_save, sender=get_user_model())
def revoke_token_on_password_change(sender: Any, instance: Any, **kwargs: Any) -> None:
    if instance.__dict__.pop("_dashboard_password_changed", False):
        tokens.revoke(instance, audit.current_actor(), reason="password changed")
