"""What `make run` prints: its own lines, prefixed so they stand out among the services'."""

from __future__ import annotations

import sys


def say(message: str) -> None:
    print(f"[make run] {message}", flush=True)


def fail(message: str) -> None:
    print(f"[make run] ERROR: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)
