"""Record changes in the audit trail: one call per action, from views, tasks and commands."""

from __future__ import annotations

import contextvars
import logging
from typing import Any, cast

from django.dispatch import Signal

from .models import AuditEvent

log = logging.getLogger(__name__)

# Sent after every recorded event, with `event` (the AuditEvent) and `payload` (its JSON).
# The live updates (repository_app) connect to it to feed the overview's activity list; a
# signal, so that team, which every app uses, imports none of them.
recorded = Signal()

# Who is acting in this request or command, for changes recorded by signals.
_actor: contextvars.ContextVar[Any] = contextvars.ContextVar("audit_actor", default=None)


def current_actor() -> Any:
    return _actor.get()


def set_actor(user: Any) -> contextvars.Token:
    return _actor.set(user)


def reset_actor(token: contextvars.Token) -> None:
    _actor.reset(token)


ACTIONS = (
    "load",
    "unload",
    "reload",
    "rollout",
    "config.save",
    "config.restore",
    "config.try",
    "upload",
    "version.delete",
    "model.delete",
    "sweep.start",
    "sweep.cancel",
    "sweep.resume",
    "search.start",
    "search.cancel",
    "search.resume",
    "search.apply",
    "user.create",
    "user.change",
    "user.role",
    "user.activate",
    "user.deactivate",
    "user.password",
    "user.delete",
    "user.narrow",
    "user.unnarrow",
    "login",
    "login.failed",
    "token.create",
    "token.revoke",
    "server.add",
    "server.change",
    "server.remove",
)


def record(
    who: Any,
    action: str,
    *,
    model_name: str = "",
    server: str = "",
    target: str = "",
    # TextChoices members are str; untyped Django shows mypy a (value, label) tuple.
    outcome: str = cast(str, AuditEvent.Outcome.OK),
    detail: str = "",
    before_sha256: str = "",
    after_sha256: str = "",
) -> AuditEvent:
    """Append one event. `who` is a user, a username, or None (the system); `server` names
    the Triton server the action concerned, when it concerned one."""
    user = who if hasattr(who, "get_username") else None
    username = user.get_username() if user is not None else (who or "system")
    event = AuditEvent.objects.create(
        user=user if user is not None and user.pk else None,
        username=username,
        action=action,
        model_name=model_name,
        server=server,
        target=target,
        outcome=outcome,
        detail=detail[:10_000],
        before_sha256=before_sha256,
        after_sha256=after_sha256,
    )
    _announce(event)
    return event


def _announce(event: AuditEvent) -> None:
    """Tell the listeners (the overview's activity feed) about the event."""
    recorded.send(sender=AuditEvent, event=event, payload=as_json(event))


def as_json(event: AuditEvent) -> dict[str, Any]:
    return {
        "id": event.pk,
        "at": event.at.isoformat(),
        "user": event.username,
        "action": event.action,
        "model": event.model_name,
        "server": event.server,
        "target": event.target,
        "outcome": event.outcome,
        "detail": event.detail,
        "before_sha256": event.before_sha256,
        "after_sha256": event.after_sha256,
    }
