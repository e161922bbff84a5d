"""The C library, for the few calls Python's os module lacks (malloc tuning, fallocate,
renameat2). None where it cannot be loaded; each caller falls back on its own."""

from __future__ import annotations

import ctypes
from typing import Any


def _load() -> Any:
    try:
        # The process's own symbols: glibc (or musl) is already loaded. use_errno, so a
        # caller can read the errno of a failed call with ctypes.get_errno().
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = _load()


def function(name: str) -> Any:
    """The C function ``name``, or None where the library or the function is missing."""
    return getattr(LIBC, name, None) if LIBC is not None else None
