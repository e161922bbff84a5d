"""Group names and the event schema for live updates (one module owns both).

One envelope: every event is `{"type", "group", "seq", ...its fields}`, built only by
`publish`. `seq` is a per-group counter kept in Redis, so a client that sees a gap (or
reconnects) knows to resync over HTTP. Groups are per Triton server (``repository.<server>``,
``server.<server>``, a model's group names its server), and per repository for what
belongs to the files (``config_group``: saves and editor presence), so servers sharing a
repository see each other's config saves. Each type's fields are declared once, in
`EVENT_FIELDS`; `publish` refuses a type that is not declared or an event that lacks one
of its fields, so producers cannot drift apart (the sweep's and the search's engines,
the worker and the watchdog all send the same shape). The latest repository snapshot is
kept in Redis too (per server), so a page that connects late gets the whole state first.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

log = logging.getLogger(__name__)

ACTIVITY_GROUP = "activity"


# Every event type with the fields it always carries (it may carry more, e.g. a model's
# states or the derived metrics of whatever GPUs exist). Groups: see the *_GROUP names and
# the *_group functions below.
EVENT_FIELDS: dict[str, frozenset[str]] = {
    # repository groups (repository_group)
    "models.states": frozenset({"models", "full"}),
    "model.action": frozenset({"model", "action", "phase", "by"}),
    "model.versions": frozenset({"model"}),
    # model groups (model_group)
    "model.stats": frozenset({"model", "stats"}),
    # a model's tracing turned on, ended or stopped (inference.trace_job.session_json)
    "trace.state": frozenset({"id", "model", "server", "state", "count", "ended_why"}),
    # a check run's state and verdict (inference.check_job.result_json)
    "check.result": frozenset(
        {"id", "check", "name", "model", "server", "state", "passed", "worst", "message"}
    ),
    # config groups (config_group): one model's files in one repository
    "config.saved": frozenset({"model", "revision", "sha256", "by", "diff_url"}),
    "presence": frozenset({"model", "users"}),
    # server groups (server_group)
    "server.metrics": frozenset({"time", "models", "gpus"}),
    # activity group (team.audit.recorded)
    "activity": frozenset({"id", "at", "user", "action", "model", "server", "target", "outcome"}),
    # user groups (user_group)
    "notify": frozenset({"message", "url"}),
    # one response of a decoupled model's Try request, as it arrives (inference.trying)
    "try.response": frozenset({"stream", "index", "t_ms", "outputs"}),
    # job groups (sweep_group): a sweep or a config search
    # placement: where the job's task went and why, and who claimed it (jobs.placement_json)
    "sweep.state": frozenset({"sweep", "kind", "state", "error", "cancel_requested", "placement"}),
    "sweep.window": frozenset({"sweep", "point", "closed_at"}),
    # summary, started_at, server_now, windows_before_start: sweep_read.running_json
    "sweep.level": frozenset(
        {"sweep", "point", "levels_done", "levels_total", "round", "summary", "started_at"}
        | {"server_now", "windows_before_start"}
    ),
    "sweep.summary": frozenset({"sweep", "state", "error", "summary"}),
    "search.candidate": frozenset({"search", "candidate"}),
    "search.result": frozenset({"search", "state", "result"}),
    # what a run changed in the search (a budget from its knee, the restore's message): the
    # fields of search.reading.running_json
    "search.changed": frozenset(
        {"search", "constraints", "metrics", "constraints_text", "budget_from"}
        | {"restore_message"}
    ),
    # rollout groups (rollout_group): one load/unload/reload on several servers
    "rollout.target": frozenset({"rollout", "server", "state", "reason", "message"}),
    "rollout.state": frozenset({"rollout", "state", "summary"}),
}


class UndeclaredEvent(ValueError):
    """A programming error: an event type or field that EVENT_FIELDS does not declare."""


def check_event(event_type: str, payload: dict[str, Any]) -> None:
    fields = EVENT_FIELDS.get(event_type)
    if fields is None:
        raise UndeclaredEvent(f"event type {event_type!r} is not declared in EVENT_FIELDS")
    missing = fields - payload.keys()
    if missing:
        raise UndeclaredEvent(f"{event_type} event without {', '.join(sorted(missing))}")


def repository_group(server: str) -> str:
    """Model states and actions of one server (server names: server_rules.NAME_RULE)."""
    return f"repository.{server}"


def server_group(server: str) -> str:
    """One server's metrics (the Server page's live charts)."""
    return f"server.{server}"


def model_group(server: str, name: str) -> str:
    # Group names allow only [a-zA-Z0-9_.-] and 100 characters; model names may hold more.
    return f"model.{server}." + hashlib.sha1(name.encode()).hexdigest()[:20]


def config_group(repository_key: str, name: str) -> str:
    """One model's config in one repository (``servers.repository_key``): saves and who has
    its editor open, whichever server the page was opened for."""
    digest = hashlib.sha1(f"{repository_key}\0{name}".encode()).hexdigest()[:24]
    return f"config.{digest}"


def snapshot_key(server: str) -> str:
    return f"dashboard:repository:snapshot:{server}"


_clients: dict[str, redis.Redis] = {}


def shared_redis() -> redis.Redis:
    """The pooled client of REDIS_URL, for what several processes must share."""
    return _redis()


def _redis() -> redis.Redis:
    """One pooled client per Redis URL (redis-py's pool is thread-safe and starts afresh in
    a forked worker); a new client per publish cost a TCP connect each time."""
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        _clients[url] = client
    return client


def next_seq(group: str) -> int:
    # redis-py types sync and async results alike (Awaitable[Any] | Any); sync INCR gives int.
    return int(cast(int, _redis().incr(f"dashboard:seq:{group}")))


_sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="event-sender")


def _send(group: str, event: dict[str, Any]) -> None:
    async_to_sync(get_channel_layer().group_send)(group, {"type": "relay", "event": event})


def publish(
    group: str, event_type: str, payload: dict[str, Any], *, snapshot_of: str = ""
) -> dict[str, Any] | None:
    """Send an event to a group; returns it, or None when Redis is down (logged, not raised:
    live updates are best effort, pages resync over HTTP).

    ``snapshot_of``: the event is the whole state of that server, kept for late joiners; it
    is saved before it is sent, so whoever has seen it and connects afterwards gets this
    state or a newer one.
    """
    check_event(event_type, payload)
    try:
        event = {"type": event_type, "group": group, "seq": next_seq(group), **payload}
        if snapshot_of:
            _redis().set(snapshot_key(snapshot_of), json.dumps(event))
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            _send(group, event)
        else:
            # Called from a thread that runs an event loop (async_to_sync refuses that):
            # send from a helper thread and wait, keeping events in order.
            _sender.submit(_send, group, event).result(timeout=10)
        return event
    except (redis.RedisError, OSError) as exc:
        log.warning("live update to %s not sent: %s", group, exc)
        return None


def announce_activity(sender: Any, payload: dict[str, Any], **_: Any) -> None:
    """team.audit.recorded's receiver: the event goes to the overview's activity feed."""
    publish(ACTIVITY_GROUP, "activity", payload)


def load_snapshot(server: str) -> dict[str, Any] | None:
    try:
        raw = cast("bytes | None", _redis().get(snapshot_key(server)))
    except (redis.RedisError, OSError):
        return None
    return json.loads(raw) if raw else None


def current_seq(group: str) -> int:
    try:
        return int(cast("bytes | None", _redis().get(f"dashboard:seq:{group}")) or 0)
    except (redis.RedisError, OSError):
        return 0


def sweep_group(sweep_id: int) -> str:
    """A sweep's (or a config search's) windows, levels and state."""
    return f"sweep.{int(sweep_id)}"


def rollout_group(rollout_id: int) -> str:
    """A rollout's targets as each changes state, and its outcome."""
    return f"rollout.{int(rollout_id)}"


def user_group(user_id: int) -> str:
    """Notifications for one person (e.g. "your sweep finished")."""
    return f"user.{int(user_id)}"


def notify(user_id: int | None, message: str, url: str = "") -> None:
    if user_id:
        publish(user_group(user_id), "notify", {"message": message, "url": url})


# --- presence: who has a page open (the config editor) --------------------------------------

PRESENCE_TTL_S = 3600


def _presence_key(group: str) -> str:
    return f"dashboard:presence:{group}"


def presence_join(group: str, channel: str, username: str) -> list[str]:
    try:
        client = _redis()
        client.hset(_presence_key(group), channel, username)
        client.expire(_presence_key(group), PRESENCE_TTL_S)
    except (redis.RedisError, OSError):
        return [username]
    return presence(group)


def presence_leave(group: str, channel: str) -> list[str]:
    try:
        _redis().hdel(_presence_key(group), channel)
    except (redis.RedisError, OSError):
        return []
    return presence(group)


def presence(group: str) -> list[str]:
    try:
        names = cast("list[bytes]", _redis().hvals(_presence_key(group)))
    except (redis.RedisError, OSError):
        return []
    return sorted({n.decode() for n in names})
