"""Managing users as the Users page does it: create, change role, deactivate, reset a
password, delete. Each action checks its rules and writes exactly one audit row (refusals
are audited as "denied"); the signals in signals.py stay quiet for what happens here and
keep auditing changes made elsewhere (the Django admin, the shell, manage.py).

The rules: nobody acts on their own account here (their role, activity and password are
changed elsewhere or not at all); a superuser's account is managed by superusers only
(resetting its password would hand an Admin the superuser's rights); and the last active
Admin can be neither demoted, deactivated nor deleted.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q

from . import audit, tokens
from .models import AuditEvent
from .roles import ADMIN, role_of, set_role
from .signals import recorded_by_caller


class AccountRefused(Exception):
    """The action was not done; the message says why (it is audited as "denied")."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def active_admins() -> Any:
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | Q(groups__name=ADMIN))
        .distinct()
    )


def _refuse(actor: Any, action: str, user: Any, message: str) -> AccountRefused:
    audit.record(actor, action, target=user.get_username(), outcome="denied", detail=message)
    return AccountRefused(message)


def _check_other(actor: Any, action: str, user: Any, what: str) -> None:
    if user.pk == actor.pk:
        raise _refuse(actor, action, user, f"you cannot {what} your own account here")
    if user.is_superuser and not actor.is_superuser:
        raise _refuse(
            actor,
            action,
            user,
            f"{user.get_username()} is a superuser: only a superuser may {what} it",
        )


def _check_not_last_admin(actor: Any, action: str, user: Any, what: str) -> None:
    if not (user.is_active and role_of(user) == ADMIN):
        return
    if not active_admins().exclude(pk=user.pk).exists():
        raise _refuse(
            actor,
            action,
            user,
            f"{user.get_username()} is the last active Admin: {what} would leave nobody "
            "to manage users; make someone else an Admin first",
        )


def create_user(actor: Any, username: str, password: str, role: str) -> Any:
    """A new user with `role`: one "user.create" row naming the role."""
    with recorded_by_caller(), transaction.atomic():
        user = get_user_model().objects.create_user(username, password=password)
        set_role(user, role)
    audit.record(actor, "user.create", target=username, detail=f"role {role}")
    return user


def change_role(actor: Any, user: Any, role: str) -> str:
    """Give `user` another role: one "user.role" row ("Operator → Admin")."""
    before = role_of(user)
    if user.pk == actor.pk and role != before:
        raise _refuse(actor, "user.role", user, "you cannot change your own role")
    if role == before:
        return f"{user.get_username()} is already {role}"
    if user.is_superuser:
        raise _refuse(
            actor,
            "user.role",
            user,
            f"{user.get_username()} is a superuser, an Admin whatever its role: change that in "
            "the Django admin",
        )
    if role != ADMIN:
        _check_not_last_admin(actor, "user.role", user, f"making it {role}")
    with recorded_by_caller():
        set_role(user, role)
    audit.record(actor, "user.role", target=user.get_username(), detail=f"{before} → {role}")
    return f"{user.get_username()}: {before} → {role}"


def set_active(actor: Any, user: Any, active: bool) -> str:
    """Deactivate (no login, no API token, no session) or reactivate `user`."""
    action = "user.activate" if active else "user.deactivate"
    what = "reactivate" if active else "deactivate"
    _check_other(actor, action, user, what)
    if user.is_active == active:
        return f"{user.get_username()} is already {'active' if active else 'inactive'}"
    if not active:
        _check_not_last_admin(actor, action, user, "deactivating it")
    user.is_active = active
    with recorded_by_caller():
        user.save(update_fields=["is_active"])
    if active:
        detail = f"role {role_of(user)}"
    else:
        # Django refuses inactive users at login, on their sessions and their API token.
        detail = f"role {role_of(user)}; logins, sessions and the API token stop working"
    audit.record(actor, action, target=user.get_username(), detail=detail)
    if active:
        return f"{user.get_username()} is active again"
    return f"{user.get_username()} is deactivated: it can no longer sign in or use its API token"


def reset_password(actor: Any, user: Any, password: str) -> str:
    """Set a new password (already validated by the form). The password-change signal
    revokes the user's API token (audited as "token.revoke"); their sessions end because
    Django signs sessions with the password hash."""
    _check_other(actor, "user.password", user, "reset the password of")
    had_token = tokens.token_of(user) is not None
    user.set_password(password)
    with recorded_by_caller():
        user.save(update_fields=["password"])
    detail = "set by an admin; sessions ended"
    if had_token:
        detail += "; API token revoked"
    audit.record(actor, "user.password", target=user.get_username(), detail=detail)
    message = f"New password set for {user.get_username()}; their sessions ended"
    return message + (" and their API token was revoked." if had_token else ".")


def delete_user(actor: Any, user: Any) -> str:
    """Delete `user`. Their audit rows stay (they keep the username); their token goes."""
    _check_other(actor, "user.delete", user, "delete")
    _check_not_last_admin(actor, "user.delete", user, "deleting it")
    name, role = user.get_username(), role_of(user)
    kept = AuditEvent.objects.filter(Q(user=user) | Q(username=name)).count()
    had_token = tokens.token_of(user) is not None
    with recorded_by_caller():
        user.delete()
    detail = f"role {role}; {kept} audit rows kept under the name {name}"
    if had_token:
        detail += "; API token deleted"
    audit.record(actor, "user.delete", target=name, detail=detail)
    return f"User {name} deleted; their {kept} audit rows stay under the name {name}."
