"""Keeping the web process's resident memory flat under large uploads (glibc only).

Each upload chunk passes a few MiB through the process (Daphne queues the whole body
before the application reads it). glibc keeps freed memory for reuse; over many chunks,
spread across worker threads, that shows as RSS creeping up. These calls hand it back.
On other C libraries they do nothing.
"""

from __future__ import annotations

from . import libc

M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3
_MALLOPT = libc.function("mallopt")
_MALLOC_TRIM = libc.function("malloc_trim")


def tune_malloc(mmap_threshold: int = 256 * 1024, arenas: int = 2) -> None:
    """At start-up. glibc raises its mmap threshold each time a large block is freed, up to
    32 MiB; after that, the 1 MiB body buffers of every chunk come from the heap and stay
    resident. Setting the threshold explicitly turns that adjustment off. Each thread that
    handles a chunk would also get an arena of its own (up to 8 per core)."""
    if _MALLOPT is not None:
        _MALLOPT(M_MMAP_THRESHOLD, mmap_threshold)
        _MALLOPT(M_ARENA_MAX, arenas)


def release_free_memory() -> None:
    """After a chunk: return the heap's free pages to the system (well under 1 ms)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
