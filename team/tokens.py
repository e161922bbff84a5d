"""API tokens (DRF authtoken): create, revoke, and revoke on a password change. Audited.

A user has at most one token. Its key is shown once, when it is created; afterwards only
that it exists and when it was made.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rest_framework.authtoken.models import Token

from . import audit


def token_of(user: Any) -> Token | None:
    return Token.objects.filter(user=user).first()


def created_by_user() -> dict[Any, datetime]:
    """When each user's token was created, by user id (users without one are absent)."""
    return dict(Token.objects.values_list("user_id", "created"))


def create(user: Any, actor: Any) -> Token:
    """A new token for `user`, replacing the one it had."""
    replaced, _ = Token.objects.filter(user=user).delete()
    token = Token.objects.create(user=user)
    audit.record(
        actor,
        "token.create",
        target=user.get_username(),
        detail="replaced the previous token" if replaced else "",
    )
    return token


def revoke(user: Any, actor: Any, reason: str = "") -> bool:
    """Delete `user`'s token; False (and nothing audited) when it had none."""
    deleted, _ = Token.objects.filter(user=user).delete()
    if deleted:
        audit.record(actor, "token.revoke", target=user.get_username(), detail=reason)
    return bool(deleted)
