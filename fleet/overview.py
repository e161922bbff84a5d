"""The fleet overview: every server's health, version, GPUs and load, and the matrix of
models × servers (each cell the model's state on that server, with its reason).

What the pollers know is read from Redis in one round trip: each server's last repository
snapshot (``events.load_snapshot``'s key) and its card (``poller.record_card``: Triton's
version, its GPUs and the requests/s over the last poll). A server that no poller
holds (no Celery worker runs, or the poller has not taken it yet) is asked directly, all
such servers at once, so a page never shows an old snapshot as the current state. The
models on disk are listed per repository (once for servers sharing one), so a down
server's column still shows what its repository holds.

The cell rule (``cell``) is mirrored by static/js/fleet.js for live updates.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from inference.checks import verdicts as check_verdicts
from registry import reachability, servers
from registry.server_rules import label_pair
from registry.servers import Server
from registry.triton_clients import get_client
from repository_app import events, repository
from repository_app.status import group_index, state_json, unknown_json
from triton_api.client import TritonError

log = logging.getLogger(__name__)
ABSENT = "not in this server's repository"
NOT_WATCHED = (
    "no poller watches this server (is a Celery worker running?): states as of this page "
    "load, not live"
)
_asker = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fleet-ask")


# --- which servers ------------------------------------------------------------------------


def parse_filter(items: Iterable[str]) -> list[tuple[str, str]]:
    """``?label=env=prod`` items (several: all must hold); ValueError naming a bad one."""
    return [label_pair(item) for item in items if item]


def matches(server: Server, wanted: Sequence[tuple[str, str]]) -> bool:
    return all(server.labels.get(name) == value for name, value in wanted)


def visible(wanted: Sequence[tuple[str, str]], among: list[Server] | None = None) -> list[Server]:
    """The servers whose labels match, of `among` (every server when None; callers pass
    the ones the user may see, `server_access.visible_servers`)."""
    return [s for s in (servers.all() if among is None else among) if matches(s, wanted)]


def all_labels(known: Iterable[Server]) -> list[str]:
    """Every NAME=VALUE some server has, for the filter's choices."""
    return sorted({f"{k}={v}" for s in known for k, v in s.labels.items()})


# --- what each server is doing --------------------------------------------------------------


@dataclass
class Column:
    """One server as the overview shows it: its card and its models' states."""

    server: Server
    watched: bool  # a poller holds it: its states come from that poller, live
    up: bool
    reason: str  # why it is down ("Triton unreachable since 14:05: ...")
    version: str = ""
    gpus: list[dict[str, Any]] = field(default_factory=list)
    requests_per_s: float | None = None
    card_time: float | None = None
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # Triton's states
    on_disk: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def note(self) -> str:
        """What a down server's column says: "unreachable since 14:05: <reason>"."""
        return self.reason.removeprefix("Triton ") if not self.up else ""

    @property
    def ready(self) -> int:
        return sum(1 for info in self.models.values() if info.get("state") == "READY")

    @property
    def gpu_summary(self) -> str:
        if not self.gpus:
            return ""
        used = [g["memory_used_bytes"] for g in self.gpus if g.get("memory_used_bytes") is not None]
        total = [g["memory_total_bytes"] for g in self.gpus if g.get("memory_total_bytes")]
        util = [g["utilization"] for g in self.gpus if g.get("utilization") is not None]
        parts = [f"{len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''}"]
        if util:
            parts.append(f"{100 * sum(util) / len(util):.0f}% busy")
        if used and total:
            parts.append(f"{sum(used) / 2**30:.1f} of {sum(total) / 2**30:.1f} GiB")
        return " · ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "labels": dict(self.server.labels),
            "watched": self.watched,
            "up": self.up,
            "reason": self.reason,
            "note": self.note,
            "version": self.version,
            "gpus": self.gpus,
            "requests_per_s": self.requests_per_s,
            "models": self.models,
            "on_disk": self.on_disk,
        }


def _stored(names: list[str]) -> list[tuple[Any, Any, bool]]:
    """(snapshot, card, watched) per server, in one round trip; nothing when Redis is down."""
    from .poller import card_key, lock_key

    try:
        pipe = events._redis().pipeline(transaction=False)
        for name in names:
            pipe.get(events.snapshot_key(name))
            pipe.get(card_key(name))
            pipe.exists(lock_key(name))
        raw = cast(list[Any], pipe.execute())
    except (redis.RedisError, OSError):
        return [(None, None, False)] * len(names)
    found = []
    for i in range(len(names)):
        snapshot, card, lock = raw[3 * i : 3 * i + 3]
        found.append(
            (json.loads(snapshot) if snapshot else None, json.loads(card) if card else None,
             bool(lock))
        )  # fmt: skip
    return found


def watched_snapshots(names: list[str]) -> list[dict[str, Any]]:
    """The saved snapshot of each server a poller watches (the fleet socket's first
    messages)."""
    return [snapshot for snapshot, _, watched in _stored(names) if watched and snapshot]


def _ask(server: Server) -> Column:
    """A server no poller watches, asked now (at most TRITON_TIMEOUT_S when it is down)."""
    client = get_client(server)
    try:
        index = client.repository_index()
    except TritonError as exc:
        down = reachability.down_json(server.name, exc.message)
        return Column(server, watched=False, up=False, reason=str(down["reason"]))
    reachability.mark_up(server.name)
    try:
        version = str(client.server_metadata().get("version", ""))
    except TritonError:
        version = ""
    models = {name: state_json(states) for name, states in group_index(index).items()}
    return Column(server, watched=False, up=True, reason="", version=version, models=models)


def _from_poller(server: Server, snapshot: dict[str, Any], card: dict[str, Any] | None) -> Column:
    triton = snapshot.get("triton") or {}
    up = bool(triton.get("up"))
    column = Column(
        server,
        watched=True,
        up=up,
        reason="" if up else str(triton.get("reason") or triton.get("message") or ""),
        models=dict(snapshot.get("models") or {}) if up else {},
    )
    if card and up:
        column.version = str(card.get("version") or "")
        column.gpus = list(card.get("gpus") or [])
        column.requests_per_s = card.get("requests_per_s")
        column.card_time = card.get("time")
    return column


def columns(shown: list[Server]) -> list[Column]:
    """Each server's column: from its poller when one holds it, else asked now."""
    stored = _stored([s.name for s in shown])
    found: dict[str, Column] = {}
    asked = {}
    for server, (snapshot, card, watched) in zip(shown, stored, strict=True):
        if watched and snapshot is not None:
            found[server.name] = _from_poller(server, snapshot, card)
        else:
            asked[server.name] = _asker.submit(_ask, server)
    for name, future in asked.items():
        try:
            found[name] = future.result()
        except Exception as exc:  # noqa: BLE001 - one odd server must not take the page down
            log.exception("fleet: asking %s failed", name)
            server = next(s for s in shown if s.name == name)
            found[name] = Column(server, watched=False, up=False, reason=f"cannot ask it: {exc}")
    listed: dict[str, list[str]] = {}  # once per repository, however many servers share it
    for server in shown:
        key = servers.repository_key(server)
        if key not in listed:
            listed[key] = repository.model_names(server.repository)
        found[server.name].on_disk = listed[key]
    return [found[s.name] for s in shown]


# --- the matrix ----------------------------------------------------------------------------


def cell(column: Column, model: str) -> dict[str, Any]:
    """A model's state on one server (mirrored by fleet.js): Triton's when it answers, else
    unknown with why (when the repository has it), else not in this server's repository."""
    info = column.models.get(model) if column.up else None
    if info is not None:
        return {k: info.get(k, "") for k in ("state", "label", "tone", "reason")}
    present = model in column.on_disk
    if not column.up and present:
        return {k: v for k, v in unknown_json(column.reason).items() if k != "versions"}
    if present:  # on disk, but not (yet) in Triton's index
        return {k: v for k, v in state_json([]).items() if k != "versions"}
    return {"state": "absent", "label": "—", "tone": "neutral", "reason": ABSENT}


def rows(shown: list[Column]) -> list[str]:
    """The union of every shown server's models, on disk or in Triton."""
    names: set[str] = set()
    for column in shown:
        names.update(column.on_disk)
        names.update(column.models)
    return sorted(names)


def overview(
    wanted: Sequence[tuple[str, str]], among: list[Server] | None = None
) -> dict[str, Any]:
    """Everything the page and its JSON show, for the servers whose labels match (of
    `among`, as `visible`)."""
    every = servers.all() if among is None else among
    shown = columns([s for s in every if matches(s, wanted)])
    return {
        "columns": shown,
        "rows": rows(shown),
        "labels": all_labels(every),
        "hidden": len(every) - len(shown),
        "checks": check_verdicts([c.name for c in shown]),
    }


def check_mark(
    checks: dict[tuple[str, str], dict[str, Any]], server: str, model: str
) -> dict[str, Any] | None:
    """The mark after a cell's state where the model's checks ran on that server: "✓ checks"
    when each one's last run passed, "✗ 1 of 3 checks" otherwise (None: none ran there)."""
    found = checks.get((model, server))
    if found is None:
        return None
    if not found["failed"]:
        return {"ok": True, "text": "✓ checks", "title": f"{found['total']} passed"}
    worst = f"; worst difference {found['worst']:g}" if found["worst"] is not None else ""
    return {
        "ok": False,
        "text": f"✗ {found['failed']} of {found['total']} checks",
        "title": f"failing: {', '.join(found['failing'])}{worst}",
    }
