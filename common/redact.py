"""Credentials never reach a page, a log line or an error message.

``redact("redis://:s3cret@host:6379/0 refused")`` gives ``"redis://:**@host:6379/0 refused"``,
the way Celery prints its broker URL: the user name stays, the password does not.
"""

from __future__ import annotations

import re

_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")


def redact(text: str) -> str:
    return _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:**@", text)
