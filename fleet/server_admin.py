"""Adding, changing and removing the Triton servers the dashboard manages.

The one set of domain functions behind the Servers pages, the API (``server_api``) and
``manage.py servers``: each checks the caller's permission (``team.manage_servers``, the
server passed as the object where there is one), checks the fields with
``server_rules.check`` (every refusal on its field, nothing stored), and records one audit
row naming the server. The API key is stored, never echoed: audit details and messages
say only whether it was set, replaced or cleared.

``default`` (the TRITON_* environment) is neither changed nor removed here. Removing a
server is refused while it has a queued or running sweep or search, or an upload in
progress (each named: cancel first); otherwise its desired loads and its metrics history
go with it (nothing would ever read or prune them again), while its sweeps, config history
and audit rows stay. Every process reads the rows at call time (``servers.get``/``all``);
the pollers follow within ``poller.REFRESH_S``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
from django.apps import apps
from django.conf import settings
from django.db import IntegrityError, transaction

from registry import reachability, server_access, servers
from registry.models import TritonServer
from registry.server_rules import NAME_RULE, InvalidServer, check, labels_text
from registry.servers import Server, UnknownServer
from repository_app import events
from repository_app.models import ModelIntent
from triton_api.address import join_host_port, split_host_port

from . import poller

MANAGE = "team.manage_servers"
CANNOT_MANAGE = "your role cannot add, edit or remove Triton servers (Admins can)"
FROM_ENV = (
    "the server 'default' is defined by the TRITON_* environment variables: change them "
    "and restart the dashboard"
)
# What a caller may give, in the order forms and messages list them.
FIELDS = (
    "name", "grpc_url", "http_url", "metrics_url", "repository", "labels", "api_key",
    "api_key_header", "require_local_worker",
)  # fmt: skip
REQUIRED = ("name", "grpc_url")
RENAME = (
    "a server's name cannot change (sweeps, history and the audit trail name it): add a new "
    "server and remove this one"
)
# Triton's default ports: an address left out is guessed on the gRPC address's host.
DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT = 8000, 8002


class NotAllowed(Exception):
    """The caller's role may not do this (403); ``message`` is fit to show."""

    def __init__(self, message: str = CANNOT_MANAGE) -> None:
        self.message = message
        super().__init__(message)


class Refused(Exception):
    """Allowed, but not now or not this server (409): ``default``, a running sweep..."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Removed:
    server: Server
    intents: int  # desired loads deleted
    history_points: int  # metrics history rows deleted

    @property
    def message(self) -> str:
        return (
            f"Server {self.server.name} removed: {self.intents} desired load"
            f"{'s' if self.intents != 1 else ''} and {self.history_points} metrics history "
            "point(s) deleted; its sweeps, searches, config history and audit rows are kept."
        )


def allowed(user: Any, server: Server | None = None) -> bool:
    return bool(user.has_perm(MANAGE, server) if server is not None else user.has_perm(MANAGE))


def require(user: Any, action: str, name: str, server: Server | None = None) -> None:
    """NotAllowed unless ``user`` may manage servers; a refusal is audited as denied."""
    if not allowed(user, server):
        _audit(user, action, name, outcome="denied", detail=CANNOT_MANAGE)
        raise NotAllowed()


def _audit(user: Any, action: str, name: str, *, outcome: str = "ok", detail: str = "") -> None:
    from team import audit

    # A refused request may name no valid server: the column keeps names only.
    server = name if NAME_RULE.fullmatch(name) else ""
    audit.record(user, action, server=server, target=name[:255], outcome=outcome, detail=detail)


def _host(grpc_url: str) -> str:
    """The gRPC address's host (unbracketed); ``localhost`` when it names none."""
    try:
        return split_host_port(grpc_url.strip().split("://", 1)[-1].rstrip("/"))[0]
    except ValueError:  # the address's own check says what is wrong with it
        return "localhost"


def with_defaults(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A new server's fields with what was left out (absent, None or "") filled in: the HTTP
    and metrics addresses on the gRPC address's host at Triton's default ports (8000,
    8002), the repository MODEL_REPOSITORY (shared with ``default``: the usual shared
    volume), the key's name ``dashboard-key``, no labels."""
    filled = {k: v for k, v in fields.items() if k in REQUIRED or v not in (None, "")}
    for field in REQUIRED:
        filled.setdefault(field, "")
    grpc = filled["grpc_url"]
    if isinstance(grpc, str) and grpc.strip():
        host = _host(grpc)
        filled.setdefault("http_url", join_host_port(host, DEFAULT_HTTP_PORT))
        filled.setdefault(
            "metrics_url", f"http://{join_host_port(host, DEFAULT_METRICS_PORT)}/metrics"
        )
    filled.setdefault("repository", str(settings.MODEL_REPOSITORY))
    filled.setdefault("api_key_header", "dashboard-key")
    filled.setdefault("labels", {})
    return filled


def validate(
    fields: Mapping[str, Any], *, editing: TritonServer | None = None, user: Any = None
) -> dict[str, Any]:
    """The fields of a new server (``editing`` None: what was left out filled in) or the
    changes to a stored one, cleaned as they are stored; InvalidServer naming every field
    at fault, unknown fields and a new name included. Reads only. A taken address names its
    server only when ``user`` may see it (no user: it is never named)."""
    errors: dict[str, str] = {
        f: f"unknown field; a server has {', '.join(FIELDS)}" for f in fields if f not in FIELDS
    }
    given = {k: v for k, v in fields.items() if k in FIELDS}
    if editing is None:
        given = with_defaults(given)
    else:
        if given.pop("name", editing.name) != editing.name:
            errors["name"] = RENAME
        if given.get("api_key") is None:
            given.pop("api_key", None)  # absent (or null): the stored key stays
    hidden = server_access.hidden_names(user) if user is not None else None
    try:
        cleaned = check(
            given,
            exclude_pk=editing.pk if editing is not None else None,
            may_see=lambda name: hidden is not None and name not in hidden,
        )
    except InvalidServer as exc:
        errors.update(exc.errors)
    if errors:
        raise InvalidServer(errors)
    return {k: str(v) if k == "repository" else v for k, v in cleaned.items()}


def create(user: Any, fields: Mapping[str, Any]) -> Server:
    """Register a server (it is not contacted here: one that does not answer is added and
    shown down by its poller). InvalidServer names every field at fault."""
    name = str(fields.get("name") or "")
    require(user, "server.add", name)
    try:
        with transaction.atomic():
            row = TritonServer.objects.create(**validate(fields, user=user))
    except IntegrityError:
        # Added meanwhile under this name or address: says which, on its field.
        validate(fields, user=user)
        raise
    server = Server.from_row(row)
    _audit(user, "server.add", server.name, detail=_describe(server))
    return server


def _stored(user: Any, action: str, name: str) -> Server:
    """The stored server ``name`` that ``user`` may change or remove (not ``default`` from
    the TRITON_* settings); UnknownServer, or Refused saying why."""
    server = servers.get(name)
    require(user, action, name, server)
    if server.from_env:
        raise Refused(FROM_ENV)
    return server


def _locked_row(name: str) -> TritonServer:
    """Its row, locked until the transaction ends (removed meanwhile: UnknownServer)."""
    row = TritonServer.objects.select_for_update().filter(name=name).first()
    if row is None:
        raise UnknownServer(name)
    return row


def update(user: Any, name: str, changes: Mapping[str, Any]) -> tuple[Server, list[str]]:
    """Change some fields of a stored server: (the server, the fields that changed). The
    name stays (sweeps, history and the audit trail refer to it); an ``api_key`` of ""
    clears the key, an absent one leaves it."""
    server = _stored(user, "server.change", name)
    with transaction.atomic():
        row = _locked_row(name)
        cleaned = validate(changes, editing=row, user=user)
        changed = [f for f in FIELDS if f in cleaned and getattr(row, f) != cleaned[f]]
        for field in changed:
            setattr(row, field, cleaned[field])
        if changed:
            row.save()
    after = Server.from_row(row)
    if changed:
        _audit(user, "server.change", name, detail=_changes(server, after, changed))
    return after, changed


def blockers(name: str) -> list[str]:
    """What keeps a server from being removed now: its queued or running sweeps and
    searches, and its uploads in progress (each named)."""
    sweep_model = apps.get_model("profiler_app", "Sweep")
    found = [
        f"{'search' if job.kind == 'search' else 'sweep'} #{job.pk} of {job.model} ({job.state})"
        for job in sweep_model.objects.filter(
            server=name, state__in=("queued", "running")
        ).order_by("pk")
    ]
    upload_model = apps.get_model("repository_app", "Upload")
    found += [
        f"upload of {u.model}/{u.filename} ({u.state})"
        for u in upload_model.objects.filter(server=name, state__in=("receiving", "processing"))
    ]
    return found


def remove(user: Any, name: str) -> Removed:
    """Remove a stored server and what only it used; Refused (naming them) while it has
    work queued or running."""
    server = _stored(user, "server.remove", name)
    with transaction.atomic():
        row = _locked_row(name)
        blocking = blockers(name)
        if not blocking:
            intents = ModelIntent.objects.filter(server=name).delete()[0]
            points = sum(
                apps.get_model("repository_app", model).objects.filter(server=name).delete()[0]
                for model in ("ModelMetricPoint", "ServerMetricPoint", "GpuMetricPoint")
            )
            # Its job slot (free: nothing runs) would otherwise outlive it.
            apps.get_model("profiler_app", "SweepSlot").objects.filter(
                server=name, sweep__isnull=True
            ).delete()
            row.delete()
    if blocking:
        message = (
            f"the server {name} has {'; '.join(blocking)}: cancel "
            f"{'it' if len(blocking) == 1 else 'them'} (or wait until done), then remove it"
        )
        _audit(user, "server.remove", name, outcome="failed", detail=message)
        raise Refused(message)
    _forget_live_state(name)
    removed = Removed(server, intents, points)
    _audit(user, "server.remove", name, detail=f"{_describe(server)}; {removed.message}")
    return removed


def _forget_live_state(name: str) -> None:
    """Its saved snapshot, down-since mark and fleet card: a server added later under the
    same name starts afresh (its poller stops within poller.REFRESH_S)."""
    with contextlib.suppress(redis.RedisError, OSError):
        events._redis().delete(
            events.snapshot_key(name), reachability.key(name), poller.card_key(name)
        )


def _describe(server: Server) -> str:
    """A server as the audit trail keeps it: every field but the key's value."""
    return (
        f"gRPC {server.grpc_url}, HTTP {server.http_url}, metrics {server.metrics_url}, "
        f"repository {server.repository}, labels {labels_text(server.labels) or 'none'}, "
        f"API key {'set' if server.api_key else 'none'}"
        + (", requires its own worker" if server.require_local_worker else "")
    )


def _changes(before: Server, after: Server, changed: list[str]) -> str:
    parts = []
    for field in changed:
        if field == "api_key":
            done = "cleared" if not after.api_key else "replaced" if before.api_key else "set"
            parts.append(f"API key {done}")
        elif field == "labels":
            parts.append(
                f"labels {labels_text(before.labels) or 'none'} -> "
                f"{labels_text(after.labels) or 'none'}"
            )
        else:
            parts.append(f"{field} {getattr(before, field)} -> {getattr(after, field)}")
    return "; ".join(parts)
