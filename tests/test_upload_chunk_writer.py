"""How a chunk's bytes reach the staged file (uploads/chunk_writer.py): past the page cache
with O_DIRECT where the file system allows it and the chunk starts on a block boundary,
through it otherwise; byte for byte the same either way, and a write's error (a full disk)
surfaces in the caller."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from repository_app.uploads import chunk_writer
from repository_app.uploads.chunk_writer import ALIGN, BUFFER, ChunkWriter

KiB = 1024


def write_in_blocks(
    path: Path, offset: int, data: bytes, block: int, digest: Any = None
) -> ChunkWriter:
    with ChunkWriter(path, offset, digest) as writer:
        for start in range(0, len(data), block):
            writer.write(data[start : start + block])
        writer.finish()
    return writer


@pytest.mark.parametrize(
    ("offset", "size", "block"),
    [
        (0, 2 * BUFFER + 3 * ALIGN + 123, 1024 * KiB),  # whole buffers, then a tail under a block
        (8 * ALIGN, BUFFER, 700 * KiB),  # blocks that straddle the buffer's end
        (0, 100, 100),  # less than one block: all through the cache
        (ALIGN + 5, 3 * ALIGN, 4000),  # an unaligned start (a client's odd chunk size)
    ],
)
def test_the_staged_bytes_are_exactly_the_chunks(
    tmp_path: Path, offset: int, size: int, block: int
) -> None:
    path = tmp_path / "data"
    head = os.urandom(offset)
    path.write_bytes(head)
    data = os.urandom(size)
    digest = hashlib.sha256(head)  # the hash of the chunks before, going on
    write_in_blocks(path, offset, data, block, digest)
    assert path.read_bytes() == head + data
    assert digest.hexdigest() == hashlib.sha256(head + data).hexdigest()


def test_an_aligned_chunk_on_this_disk_goes_past_the_page_cache(tmp_path: Path) -> None:
    # The project's machines keep /tmp on ext4, which takes O_DIRECT.
    path = tmp_path / "data"
    path.touch()
    with ChunkWriter(path, 0) as writer:
        assert writer.direct is not None
    with ChunkWriter(path, 0) as writer:
        writer.write(b"x" * 10)
        writer.finish()
    with ChunkWriter(path, 10) as unaligned:
        assert unaligned.direct is None


def test_a_file_system_without_direct_io_is_written_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def refusing(path: object, flags: int, *args: object) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")  # what tmpfs answers
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(chunk_writer.os, "open", refusing)
    path = tmp_path / "data"
    path.touch()
    data = os.urandom(BUFFER + 17)
    digest = hashlib.sha256()
    writer = write_in_blocks(path, 0, data, 1024 * KiB, digest)
    assert writer.direct is None
    assert path.read_bytes() == data
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_failed_direct_write_is_raised_in_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "data"
    path.touch()
    real_pwrite = os.pwrite

    def full(fd: int, data: object, offset: int) -> int:
        if offset >= BUFFER:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(chunk_writer.os, "pwrite", full)
    with ChunkWriter(path, 0) as writer:
        assert writer.direct is not None
        with pytest.raises(OSError) as raised:
            for _ in range(4):
                writer.write(b"y" * BUFFER)  # the second buffer's write fails on its thread
            writer.finish()
    assert raised.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"y" * BUFFER  # the first buffer, written before


def test_a_finished_chunks_buffers_serve_the_next_chunk_and_a_failed_ones_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunk_writer, "_spare", [])
    path = tmp_path / "data"
    path.touch()
    first = os.urandom(2 * BUFFER)
    with ChunkWriter(path, 0) as writer:
        buffers = {id(buffer): buffer for buffer in writer._buffers}
        writer.write(first)
        writer.finish()
    # Kept, still mapped, for the next chunk.
    assert [{id(buffer) for buffer in pair} for pair in chunk_writer._spare] == [set(buffers)]
    second = os.urandom(ALIGN + 10)  # shorter than what the buffers still hold
    with ChunkWriter(path, len(first)) as writer:
        assert {id(buffer) for buffer in writer._buffers} == set(buffers)
        writer.write(second)
        writer.finish()
    assert path.read_bytes() == first + second  # nothing left over from the first chunk

    with ChunkWriter(path, 0) as failed:
        assert {id(buffer) for buffer in failed._buffers} == set(buffers)
        failed.write(b"z" * 100)  # closed without finishing, as when the client went away
    assert chunk_writer._spare == [] and all(buffer.closed for buffer in buffers.values())
