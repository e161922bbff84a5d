"""Keeping the web process's resident memory flat under large uploads (glibc only).

Each upload chunk passes a few MiB through the process (Daphne queues the whole body
before the application reads it). glibc keeps freed memory for reuse; over many chunks,
spread across worker threads, that shows as RSS creeping up. These calls hand it back.
On other C libraries they do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    libc = ctypes.CDLL(name)
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC = _libc()


def tune_malloc(mmap_threshold: int = 256 * 1024, arenas: int = 2) -> None:
    """At start-up. glibc raises its mmap threshold each time a large block is freed, up to
    32 MiB; after that, the 1 MiB body buffers of every chunk come from the heap and stay
    resident. Setting the threshold explicitly turns that adjustment off. Each thread that
    handles a chunk would also get an arena of its own (up to 8 per core)."""
    if _LIBC is not None:
        _LIBC.mallopt(M_MMAP_THRESHOLD, mmap_threshold)
        _LIBC.mallopt(M_ARENA_MAX, arenas)


def release_free_memory() -> None:
    """After a chunk: return the heap's free pages to the system (well under 1 ms)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
