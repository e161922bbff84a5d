"""A worker thread's database connection, kept from one upload chunk to the next.

Django opens a connection for each request and closes it after (CONN_MAX_AGE is 0: under
ASGI every request runs in a thread of its own, where a kept connection would leak). Upload
chunks run in the event loop's reused worker threads instead (chunk_asgi), so each of those
threads can keep one: connecting costs ~3.7 ms on PostgreSQL and ~0.5 ms on SQLite here,
once per chunk otherwise. A kept connection is checked before it is used again (Django's
own health check: PostgreSQL answers a ping) and dropped when it erred, when it was left in
a transaction, or after MAX_AGE seconds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from django.db import connection

MAX_AGE = 300.0  # seconds; then a fresh one (a server that moved, a rotated password)

_opened = threading.local()


@contextlib.contextmanager
def kept_connection() -> Iterator[None]:
    """Use this thread's kept connection (or a new one) for the block, and keep it after."""
    _check_before_use()
    try:
        yield
    finally:
        raw = connection.connection
        if raw is not None and (
            connection.errors_occurred
            or connection.in_atomic_block
            or not connection.get_autocommit()
        ):
            connection.close()
        elif raw is not None and getattr(_opened, "raw", None) is not raw:
            _opened.raw, _opened.at = raw, time.monotonic()  # opened in this block


def _check_before_use() -> None:
    raw = connection.connection
    if raw is None:
        return
    if getattr(_opened, "raw", None) is not raw:  # opened outside these blocks
        _opened.raw, _opened.at = raw, time.monotonic()
    if time.monotonic() - _opened.at > MAX_AGE or not connection.is_usable():
        connection.close()
