"""One chunk of an upload: its row read once under the upload's lock, checked, and written.

Per chunk, after the caller authenticated: one query reads the upload's row together with
the user's role facts (``team.role_facts``) and the registry (``servers.all_column``), under
the upload's lock; the ownership and role checks then run on what it read; one UPDATE
records the new offset. The lock's path comes from the row's server, so it is remembered
from an earlier step in this process (``staging.known_lock_path``; creating the upload is
one): a process's first chunk of an upload reads the row once more, before the lock, to
find it. After locking, the path is found again from the row: a server whose repository
moved meanwhile is locked again at its new place.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models.query import RawQuerySet
from django.utils import timezone

from common import preallocate
from common.request_memo import remembering
from registry import servers
from team import role_facts

from ..disk import flock
from ..models import Upload
from . import staging
from .chunk_writer import ChunkWriter
from .staging import DISK_FULL, READ_BLOCK, Readable, UploadError

_SERVERS = "registry_servers"
_LOCK_TRIES = 3  # a repository that moves under every try: give up, the client resends


def read_checked(user: Any, upload_id: object) -> Upload:
    """The user's upload, its role checks passed, in one query: 404 for an id that is not
    an upload of theirs (or is on a server hidden from them), 403 when their role on its
    server no longer allows uploading. Inside a memo (``remembering``)."""
    try:
        key = uuid.UUID(str(upload_id))
    except ValueError:
        raise UploadError("no such upload", 404) from None
    row = next(iter(_row_with_facts(user, key)), None)
    if row is not None:
        role_facts.remember_read(user, row)
        servers.remember_all(getattr(row, _SERVERS))
    upload = staging.check_owned(user, row)
    staging.check_may_continue(user, upload)
    return upload


# Django compiles a query each time it runs: ~4.5 ms for this one, whose SQL runs in
# ~0.15 ms. Its SQL is compiled once (per database and for superusers or not, whose
# permissions are all), with marks where the user's pk and the upload's id go.
_MARK_USER = -7919  # the pk of no user
_MARK_ID = uuid.UUID(int=7919)
_compiled: dict[tuple[str, str, bool], tuple[str, tuple[Any, ...]]] = {}


def _row_with_facts(user: Any, key: uuid.UUID) -> RawQuerySet[Upload]:
    """The upload's row with ``user``'s role facts and the registry as JSON columns."""
    variant = (connection.alias, connection.vendor, bool(user.is_superuser))
    if variant not in _compiled:
        marker = SimpleNamespace(pk=_MARK_USER, is_superuser=user.is_superuser)
        query = Upload.objects.filter(pk=_MARK_ID).order_by()
        query = query.annotate(**role_facts.columns(marker), **{_SERVERS: servers.all_column()})
        _compiled[variant] = query.query.sql_with_params()
    sql, marked = _compiled[variant]
    mark_id = Upload._meta.pk.get_db_prep_value(_MARK_ID, connection)  # type: ignore[union-attr]
    real_id = Upload._meta.pk.get_db_prep_value(key, connection)  # type: ignore[union-attr]
    params = [
        user.pk if value == _MARK_USER else real_id if value == mark_id else value
        for value in marked
    ]
    return Upload.objects.raw(sql, params)


@contextlib.contextmanager
def locked(user: Any, upload_id: object) -> Iterator[Upload]:
    """``read_checked`` under the upload's lock, held until the block ends."""
    with remembering():
        path: Path | None = staging.known_lock_path(upload_id)
        for _ in range(_LOCK_TRIES):
            if path is None:
                path = staging.lock_path(read_checked(user, upload_id))
            with flock(path):
                upload = read_checked(user, upload_id)
                found = staging.lock_path(upload)
                if found == path:
                    yield upload
                    return
            path = found
        raise UploadError("the upload's server moved its repository meanwhile: send it again", 409)


def append_chunk(
    user: Any, upload_id: object, offset: object, stream: Readable, length: int | None
) -> Upload:
    """Append one chunk at ``offset`` for ``user`` (whose role is checked again); returns
    the upload, its ``received`` the new offset.

    409 with ``expected_offset`` when ``offset`` is not where the staged file ends; 413 when
    the chunk is over UPLOAD_MAX_CHUNK_BYTES or would pass the declared size; 507 with
    ``expected_offset`` when the disk is full. A chunk that arrives short or fails to be
    written is cut off again, so the offset stays where it was.
    """
    with locked(user, upload_id) as upload:
        start = _offset(offset)
        length = _length(length)
        if upload.state != Upload.State.RECEIVING:
            raise UploadError(f"the upload is {upload.get_state_display()}", 409)
        path = staging.data_path(upload)
        if not path.exists():
            raise UploadError("the staged data is gone (removed as stale): start again", 410)
        end = path.stat().st_size
        if start != end:
            raise UploadError(
                f"expected offset {end}, got {start}: resume from {end}", 409, expected_offset=end
            )
        if end + length > upload.size:
            raise UploadError(
                f"the chunk would take the upload to {end + length} bytes, over its declared "
                f"size of {upload.size} bytes",
                413,
            )
        written = _write(upload, path, end, length, stream)
        Upload.objects.filter(pk=upload.pk).update(
            received=end + written, updated_at=timezone.now()
        )
        upload.received = end + written
        return upload


def _offset(offset: object) -> int:
    try:
        return int(str(offset))
    except ValueError:
        raise UploadError(
            f"Upload-Offset must be a whole number, got {offset!r}", field="Upload-Offset"
        ) from None


def _length(length: int | None) -> int:
    if length is None:
        raise UploadError(
            "send the chunk with a Content-Length header", 411, field="Content-Length"
        )
    if length > settings.UPLOAD_MAX_CHUNK_BYTES:
        raise UploadError(
            f"a chunk may hold at most {settings.UPLOAD_MAX_CHUNK_BYTES} bytes "
            "(UPLOAD_MAX_CHUNK_BYTES); split the file into smaller chunks",
            413,
            field="Content-Length",
        )
    return length


def _write(upload: Upload, path: Path, end: int, length: int, stream: Readable) -> int:
    """Write ``length`` bytes of ``stream`` at ``end``, hashing them; the bytes written."""
    digest = staging.take_hash(upload.id, end)
    written = 0
    # Through O_DIRECT where it can (chunk_writer). A write's error surfaces at a later
    # write or at finish, both inside this block, and nothing is written after close,
    # so the partial chunk can always be cut off again.
    with ChunkWriter(path, end, digest) as writer:
        try:
            while written < length:
                block = stream.read(min(READ_BLOCK, length - written))
                if not block:
                    break
                with _disk_full_refused(path, end):
                    writer.write(block)  # and hashes it
                written += len(block)
            if written != length:
                raise UploadError(
                    f"the chunk ended after {written} of {length} bytes: send it again "
                    f"from offset {end}",
                    400,
                    expected_offset=end,
                )
            with _disk_full_refused(path, end):
                writer.finish()
        except BaseException:
            os.ftruncate(writer.fd, end)  # which frees the blocks reserved past it too
            with contextlib.suppress(OSError):  # the disk may be what is full
                preallocate.reserve(writer.fd, end, upload.size - end)
            raise
    if digest is not None:
        staging.keep_hash(upload.id, end + written, digest)
    return written


@contextlib.contextmanager
def _disk_full_refused(path: Path, end: int) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        raise UploadError(
            f"the disk is full ({exc.strerror} in {path.parent.parent}): nothing of this chunk "
            f"was kept; free space and resume from offset {end}",
            507,
            expected_offset=end,
        ) from exc
