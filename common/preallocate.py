"""Reserving a file's disk blocks before it is written (Linux ``fallocate``).

A staged upload declares its size up front. Reserving that many blocks when it is created
means another writer can no longer fill the disk under an upload that was accepted. The
writes that follow land in blocks already allocated: alone, 2 GiB of 16 MiB ``pwrite``
calls took 0.3-0.4 s into reserved blocks and 0.4-5.6 s without on the development VM, but
through the web server the uploads' figures did not move (BENCHMARKS.md, hand runs).

``FALLOC_FL_KEEP_SIZE`` keeps the file's size where it is, so the size still says how many
bytes arrived (an upload resumes from it). Where the call or the file system cannot do it
(not Linux, NFS without it, old kernels), nothing is reserved and writes go on as before.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

from . import libc

FALLOC_FL_KEEP_SIZE = 1
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _fallocate() -> Any:
    call = libc.function("fallocate64") or libc.function("fallocate")
    if call is not None:
        call.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
        call.restype = ctypes.c_int
    return call


_FALLOCATE = _fallocate()


def reserve(fd: int, offset: int, length: int) -> bool:
    """Reserve ``length`` bytes of ``fd`` from ``offset`` without changing its size. True
    when reserved; False where it could not be (no fallocate, a file system without it, any
    other failure: the writes will allocate the blocks, as without this); OSError only when
    the space is not there (DISK_FULL)."""
    if _FALLOCATE is None or length <= 0:
        return False
    if _FALLOCATE(fd, FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    code = ctypes.get_errno()
    if code in DISK_FULL:
        raise OSError(code, os.strerror(code))
    return False
