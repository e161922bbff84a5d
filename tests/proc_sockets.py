"""A process's TCP sockets, read from /proc (no Django: the tests' subprocesses import it)."""

from __future__ import annotations

import os
from pathlib import Path

ESTABLISHED, LISTENING = "01", "0A"


def tcp_sockets(port: int, side: str = "local") -> dict[int, str]:
    """Inode -> TCP state of this host's sockets with ``port`` on the ``side`` ("local" or
    "remote") of the connection."""
    column = {"local": 1, "remote": 2}[side]
    found: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[column].rsplit(":", 1)[1], 16) == port:
                found[int(fields[9])] = fields[3]
    return found


def socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def connections_to(port: int, pid: int | None = None) -> set[int]:
    """The inodes of the established connections that process ``pid`` (this one by default)
    holds to ``port``."""
    sockets = tcp_sockets(port, "remote")
    return {
        inode
        for inode in socket_inodes(os.getpid() if pid is None else pid)
        if sockets.get(inode) == ESTABLISHED
    }
