"""The web server: Daphne with its own flags, tuned for large upload chunks.

    python -m dashboard.serve -b 0.0.0.0 -p 8080 dashboard.asgi:application

Two of Daphne's defaults cost upload throughput (benchmarks/bench_upload.py):
- Twisted reads a socket 64 KiB at a time; 1 MiB reads halve the per-byte overhead.
- Daphne hands a request body to the application in 8 KiB messages; one upload chunk
  of 8 MiB became 1,024 trips through the event loop. 1 MiB messages make it 8.
Neither raises memory use per request: Twisted keeps bodies over 100 kB in a temporary file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet import tcp

READ_SIZE = 1024 * 1024
BODY_MESSAGE_SIZE = 1024 * 1024


class DashboardServer(Server):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("request_buffer_size", BODY_MESSAGE_SIZE)
        super().__init__(*args, **kwargs)


class DashboardCommandLine(CommandLineInterface):
    server_class = DashboardServer


M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3


def tune_malloc(mmap_threshold: int = 256 * 1024, arenas: int = 2) -> None:
    """Keep the memory of upload chunks from staying in the process's RSS (glibc only).

    glibc raises its mmap threshold each time a large block is freed, up to 32 MiB; after
    that, the 1 MiB body buffers of every chunk come from the heap and stay resident. Setting
    the threshold explicitly turns that adjustment off. Each worker thread that handles a
    chunk would also get an arena of its own (up to 8 per core), each keeping freed memory.
    """
    name = ctypes.util.find_library("c")
    if name:
        libc = ctypes.CDLL(name)
        libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold)
        libc.mallopt(M_ARENA_MAX, arenas)


def main(argv: list[str] | None = None) -> None:
    tune_malloc()
    # A class attribute Twisted documents as the read size of a connection.
    tcp.Connection.bufferSize = READ_SIZE
    DashboardCommandLine().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
