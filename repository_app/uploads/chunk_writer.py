"""Writing one chunk's bytes to the staged file, past the page cache where the disk allows.

Through the page cache, a 16 MiB chunk took 26-46 ms to write on the development VM once
an upload was a few chunks in (2-3 ms for the first ones), while the same bytes written with
``O_DIRECT`` took 8-9 ms every time, the copy into an aligned buffer included
(``benchmarks/bench_upload.py``; BENCHMARKS.md, hand runs). ``cp`` and a ``fsync`` moved
~1 GB/s on that disk, so the disk was not the limit: the kernel's handling of fresh page
cache was. Direct writes also leave the page cache to Triton and the pages: an upload of a
30 GB model no longer evicts everything else, and the fsync at publishing has little left
to flush.

``O_DIRECT`` wants the file offset, the length and the memory aligned to the device's
block: the bytes are gathered in a page-aligned buffer and written in multiples of
``ALIGN``; what is left at the end of the chunk (under ``ALIGN`` bytes) goes through the
page cache. A chunk that starts at an unaligned offset (a client's odd chunk size), or a
file system that refuses ``O_DIRECT`` (tmpfs, some network and FUSE file systems), is
written through the page cache as before. Either way the bytes and the errors (ENOSPC
included) are the same.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashlib import _Hash as Hash

ALIGN = 4096  # a multiple of every logical block size Linux file systems use
BUFFER = 4 * 1024 * 1024
# Pairs of buffers kept for the next chunks: fresh ones cost a page fault per 4 KiB on first
# fill, 9-12 ms of copying per 16 MiB chunk where reused ones took 4 ms (development VM).
SPARE_PAIRS = 2
_spare: list[list[mmap.mmap]] = []
_spare_lock = threading.Lock()


def _take_buffers() -> list[mmap.mmap]:
    with _spare_lock:
        if _spare:
            return _spare.pop()
    return [mmap.mmap(-1, BUFFER), mmap.mmap(-1, BUFFER)]


def _keep_buffers(buffers: list[mmap.mmap]) -> bool:
    with _spare_lock:
        if len(_spare) < SPARE_PAIRS:
            _spare.append(buffers)
            return True
    return False


def write_all(fd: int, offset: int, block: bytes | memoryview) -> None:
    """Write all of ``block`` at ``offset`` (a full disk may first take part of it)."""
    view = memoryview(block)
    while view:
        count = os.pwrite(fd, view, offset)
        view, offset = view[count:], offset + count


def _open_direct(path: Path) -> int | None:
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_WRONLY | flag)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return None  # the file system has no direct I/O
        raise


class ChunkWriter:
    """Writes the bytes given to ``write`` at ``offset`` on, in order, and feeds them to
    ``digest`` (a running sha256) when there is one; ``finish`` writes what is still
    buffered and waits for it. Used as a context manager, which closes it.

    A full buffer is written and hashed on two threads of their own while the caller fills
    the other buffer: a direct write returns only once the device has the bytes, and the
    write and the sha256 each took ~10 ms of a 16 MiB chunk on the development VM. An error
    of a write (ENOSPC included) is raised by the ``write`` or ``finish`` after it.
    """

    def __init__(self, path: Path, offset: int, digest: Hash | None = None) -> None:
        self.fd = os.open(path, os.O_WRONLY)
        self.offset = offset  # where the next byte not yet handed to a write goes
        self.digest = digest
        self.direct: int | None = None
        self._buffers: list[mmap.mmap] = []
        self._filled = 0
        self._pending: list[threading.Thread] = []
        self._failure: BaseException | None = None
        self._finished = False  # and nothing views the buffers: they may serve another chunk
        try:
            if offset % ALIGN == 0:
                self.direct = _open_direct(path)
            if self.direct is not None:  # page-aligned, as O_DIRECT needs
                self._buffers = _take_buffers()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ChunkWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def write(self, block: bytes | memoryview) -> None:
        if not self._buffers:
            write_all(self.fd, self.offset, block)
            self.offset += len(block)
            if self.digest is not None:
                self.digest.update(block)
            return
        view = memoryview(block)
        while view:
            taken = min(len(view), BUFFER - self._filled)
            self._buffers[0][self._filled : self._filled + taken] = view[:taken]
            self._filled += taken
            view = view[taken:]
            if self._filled == BUFFER:
                self._hand_over()

    def finish(self) -> None:
        """Write what is buffered (the aligned part directly, the rest through the cache)
        and wait until every write has returned."""
        if self._buffers and self._filled:
            self._hand_over()
        self._wait()
        self._finished = True

    def _hand_over(self) -> None:
        """Write and hash the filled buffer on threads; fill the other one meanwhile."""
        # The other buffer's write and hash, before that buffer is filled again (and so
        # that the digest takes the buffers in order).
        self._wait()
        full, offset, size = self._buffers[0], self.offset, self._filled
        self._buffers.reverse()
        self.offset += size
        self._filled = 0
        self._pending = [
            threading.Thread(target=self._write_buffer, args=(full, offset, size)),
        ]
        if self.digest is not None:
            self._pending.append(threading.Thread(target=self._hash_buffer, args=(full, size)))
        for thread in self._pending:
            thread.start()

    def _wait(self) -> None:
        for thread in self._pending:
            thread.join()
        self._pending = []
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def _write_buffer(self, buffer: mmap.mmap, offset: int, size: int) -> None:
        assert self.direct is not None
        data = memoryview(buffer)[:size]
        try:
            whole = size - size % ALIGN
            done = 0
            while done < whole:
                count = os.pwrite(self.direct, data[done:whole], offset + done)
                done += count
                if count == 0 or count % ALIGN:  # part of a block: the rest through the cache
                    break
            write_all(self.fd, offset + done, data[done:])
        except BaseException as exc:  # raised in the caller's thread by _wait
            # Without the finished frames' locals, which may hold views of the buffer.
            traceback.clear_frames(exc.__traceback__)
            self._failure = exc
        finally:
            data.release()  # or the buffer could not be closed

    def _hash_buffer(self, buffer: mmap.mmap, size: int) -> None:
        assert self.digest is not None
        with memoryview(buffer) as view, view[:size] as data:
            self.digest.update(data)  # sha256 lets go of the GIL for blocks this large

    def close(self) -> None:
        for thread in self._pending:
            thread.join()
        self._pending = []
        if self.direct is not None:
            os.close(self.direct)
            self.direct = None
        os.close(self.fd)
        if self._finished and self._buffers and _keep_buffers(self._buffers):
            self._buffers = []
        for buffer in self._buffers:
            with contextlib.suppress(BufferError):  # still viewed somewhere: freed with it
                buffer.close()
        self._buffers = []
