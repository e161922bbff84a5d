"""Since when Triton does not answer, shared by every process (a Redis key).

While Triton is down, model states are unknown: pages say "unknown (Triton unreachable
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

KEY = "dashboard:triton:down-since"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)


def mark_down() -> datetime:
    """Record that Triton does not answer (if not yet recorded); returns since when."""
    now = timezone.now()
    try:
        client = _redis()
        client.set(KEY, now.isoformat(), nx=True)
        stored = cast("bytes | None", client.get(KEY))
        return datetime.fromisoformat(stored.decode()) if stored else now
    except (redis.RedisError, OSError, ValueError):
        return now


def mark_up() -> None:
    with contextlib.suppress(redis.RedisError, OSError):
        _redis().delete(KEY)


def down_json(message: str) -> dict[str, object]:
    """The `triton` part of a states payload while Triton does not answer."""
    since = timezone.localtime(mark_down())
    return {
        "up": False,
        "message": message,
        "since": since.isoformat(),
        "reason": f"Triton unreachable since {since:%H:%M}: {message}",
    }
