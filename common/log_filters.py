"""A refused request is one line in the log: a 403 is a role at work, not a fault.

Django logs a ``PermissionDenied`` raised by a view on ``django.request`` with its
traceback (``django.utils.log.log_response(..., exception=exc)``), so `make run`'s output
filled with the tracebacks of ordinary refusals. ``OneLineForbidden`` (settings.LOGGING)
turns every 403 record into ``Forbidden: METHOD PATH (user NAME): REASON`` without the
traceback; every other record, a 500 and its traceback included, passes unchanged.
"""

from __future__ import annotations

import logging
from typing import Any


def _escaped(text: object) -> str:
    """Control characters escaped (a %0A in a URL must not start a forged log line), the
    rest, "…" and accents included, kept readable."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in str(text))


def _username(request: Any) -> str:
    try:
        user = request.user  # resolved already: the view that refused asked for it
        return str(user.get_username()) if user.is_authenticated else "anonymous"
    except Exception:  # noqa: BLE001 - no user to name (no session yet, a broken one)
        return "unknown"


class OneLineForbidden(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) != 403 or getattr(record, "one_line", False):
            return True  # a record already made one line (the filter may be met twice)
        record.one_line = True
        request = getattr(record, "request", None)
        error = record.exc_info[1] if record.exc_info else None
        reason = str(error) if error is not None else ""
        record.msg = "Forbidden: %s %s (user %s)" + (": %s" if reason else "")
        record.args = tuple(
            _escaped(part)
            for part in (
                getattr(request, "method", "-"),
                getattr(request, "path", "-"),
                _username(request),
                *([reason] if reason else []),
            )
        )
        record.exc_info, record.exc_text = None, None
        return True
