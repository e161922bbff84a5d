"""Record changes in the audit trail: one call per action, from views, tasks and commands."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, cast

from django.db.models import QuerySet
from django.dispatch import Signal

from .models import AuditConcern, AuditEvent

log = logging.getLogger(__name__)

# Sent after every recorded event, with `event` (the AuditEvent) and `payload` (its JSON).
# The live updates (repository_app) connect to it to feed the overview's activity list; a
# signal, so that team, which every app uses, imports none of them.
recorded = Signal()

# Who is acting in this request or command, for changes recorded by signals.
_actor: contextvars.ContextVar[Any] = contextvars.ContextVar("audit_actor", default=None)


# A server's labels by its name ({} for none or an unknown one). The registry is the
# repository app's: it sets this when it starts (team imports no other app).
def _no_labels(name: str) -> Mapping[str, str]:
    return {}


labels_of: Callable[[str], Mapping[str, str]] = _no_labels


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
    "check.save",
    "check.run",
    "check.delete",
    "trace.on",
    "trace.off",
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
    servers: Iterable[str] = (),
    labels: Iterable[str] = (),
) -> AuditEvent:
    """Append one event. `who` is a user, a username, or None (the system); `server` names
    the Triton server the action concerned, when it concerned one; `servers` the others it
    concerned (a rollout's, a narrowing's matches) and `labels` the "key=value" labels it
    names itself: stored as the event's concerns, what a reader's narrowing hides."""
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
    tokens = concern_tokens([server, *servers], labels)
    AuditConcern.objects.bulk_create(AuditConcern(event=event, token=t) for t in tokens)
    event._concerns = tokens  # type: ignore[attr-defined]  # for as_json, without a query
    _announce(event)
    return event


def concern_tokens(servers: Iterable[str], labels: Iterable[str] = ()) -> list[str]:
    """``server:NAME`` for each server, ``label:KEY=VALUE`` for each of their labels now and
    for each label given."""
    tokens = {f"label:{label}" for label in labels if label}
    for name in {s for s in servers if s}:
        tokens.add(f"server:{name}")
        tokens |= {f"label:{k}={v}" for k, v in labels_of(name).items()}
    return sorted(t[:140] for t in tokens)


def hidden_tokens(names: Iterable[str], labels: Iterable[str]) -> frozenset[str]:
    """The concerns that hide an event from a reader: the servers and labels narrowed to
    none for them (registry.server_access.hidden_concerns)."""
    return frozenset({f"server:{n}" for n in names} | {f"label:{v}" for v in labels})


def visible_events(events: QuerySet[AuditEvent], hidden: Collection[str]) -> QuerySet[AuditEvent]:
    """``events`` without those that concern anything in ``hidden`` (hidden_tokens): the one
    filter of the audit page, its CSV, the API, the overview and (as ``shown``) the feed."""
    if not hidden:
        return events
    names = [t.removeprefix("server:") for t in hidden if t.startswith("server:")]
    return events.exclude(server__in=names).exclude(concerns__token__in=list(hidden))


def shown(payload: Mapping[str, Any], hidden: Collection[str]) -> bool:
    """Whether a live event (as_json) may reach a reader whose hidden concerns are these."""
    if not hidden:
        return True
    concerns = set(payload.get("concerns") or ())
    if payload.get("server"):
        concerns.add(f"server:{payload['server']}")
    return concerns.isdisjoint(hidden)


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
        "concerns": _concerns(event),
    }


def _concerns(event: AuditEvent) -> list[str]:
    cached = getattr(event, "_concerns", None)
    if cached is not None:
        return list(cached)
    return sorted(event.concerns.values_list("token", flat=True))
