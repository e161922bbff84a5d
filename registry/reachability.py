"""Since when a Triton server does not answer, shared by every process (a Redis key per
server).

While a server is down, its model states are unknown: pages say "unknown (Triton unreachable
since 14:05: <reason>)" instead of showing the last state they saw, which may be stale.
The first process to notice (the poller, or a page) records the time; the first one to
reach Triton again clears it.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import cast

import redis
from django.conf import settings
from django.utils import timezone


def key(server: str) -> str:
    return f"dashboard:triton:down-since:{server}"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)


def mark_down(server: str) -> datetime:
    """Record that the server does not answer (if not yet recorded); returns since when."""
    now = timezone.now()
    try:
        client = _redis()
        client.set(key(server), now.isoformat(), nx=True)
        stored = cast("bytes | None", client.get(key(server)))
        return datetime.fromisoformat(stored.decode()) if stored else now
    except (redis.RedisError, OSError, ValueError):
        return now


def mark_up(server: str) -> None:
    with contextlib.suppress(redis.RedisError, OSError):
        _redis().delete(key(server))


def down_json(server: str, message: str) -> dict[str, object]:
    """The `triton` part of a states payload while the server does not answer."""
    since = timezone.localtime(mark_down(server))
    return {
        "up": False,
        "message": message,
        "since": since.isoformat(),
        "reason": f"Triton unreachable since {since:%H:%M}: {message}",
    }
