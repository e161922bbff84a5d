"""Keep the roles in sync after migrate, audit user and role changes, and revoke the API
token of a user whose password changes (on any path: our page, the admin, changepassword)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import is_password_usable
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_migrate, post_save, pre_save
from django.dispatch import receiver

from . import audit, tokens
from .roles import ensure_roles


@receiver(post_migrate)
def sync_roles(sender: Any, **kwargs: Any) -> None:
    # After every app: permissions of apps migrated after this one exist only then.
    ensure_roles()


@receiver(post_save, sender=get_user_model())
def audit_user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if kwargs.get("raw"):
        return
    fields = kwargs.get("update_fields")
    if fields and set(fields) <= {"last_login", "password"}:
        return  # logins and password changes are not role changes
    audit.record(
        audit.current_actor(),
        "user.create" if created else "user.change",
        target=instance.get_username(),
        detail=f"active={instance.is_active} staff={instance.is_staff} superuser={instance.is_superuser}",
    )


@receiver(m2m_changed, sender=get_user_model().groups.through)
def audit_role_change(sender: Any, instance: Any, action: str, pk_set: Any, **kwargs: Any) -> None:
    if action not in ("post_add", "post_remove") or not pk_set:
        return
    if not hasattr(instance, "get_username"):
        return
    names = ", ".join(Group.objects.filter(pk__in=pk_set).values_list("name", flat=True))
    verb = "added to" if action == "post_add" else "removed from"
    audit.record(
        audit.current_actor(), "user.role", target=instance.get_username(), detail=f"{verb} {names}"
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
