"""The startup reconciler: remove staging data nobody will publish, and say what it removed.

Run before the web process starts (``manage.py reconcile_uploads --startup``, which
``make run`` and the container entry point call) and at any time without ``--startup``.

- staging folders without an upload row, and of uploads that ended (published, failed,
  aborted, expired): removed;
- ``.trash-*`` folders (versions being deleted when the process died): removed;
- uploads still PROCESSING: at startup nobody is publishing them, so the process died in
  the middle. If their version folder is in the repository, the rename happened and they
  are marked published; otherwise failed. Without ``--startup`` only those idle for longer
  than UPLOAD_STALE_AFTER_S are touched;
- uploads RECEIVING with no chunk for UPLOAD_STALE_AFTER_S: expired.
Each removal is logged and recorded in the audit trail (action "upload", user "system").
Every server's staging folder is looked at (servers may share one); an unfinished upload
whose server was removed is failed, its staging left to the folder's owner to remove.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from registry import servers

from ..models import Upload
from . import staging
from .staging import UploadError

log = logging.getLogger(__name__)
ENDED = (
    Upload.State.PUBLISHED,
    Upload.State.FAILED,
    Upload.State.ABORTED,
    Upload.State.EXPIRED,
)


@dataclass
class Removal:
    what: str  # the folder or upload
    reason: str
    bytes: int


def _size(path) -> int:  # type: ignore[no-untyped-def]
    total = 0
    for item in path.rglob("*"):
        try:
            if item.is_file() and not item.is_symlink():
                total += item.stat().st_size
        except OSError:
            continue
    return total


def reconcile(*, startup: bool = False) -> list[Removal]:
    roots: dict[str, servers.Server] = {}
    for server in servers.all():
        try:
            roots.setdefault(str(staging.staging_root(server)), server)
        except (UploadError, OSError) as exc:
            log.warning("upload reconciler: no staging folder for %s (%s)", server.name, exc)
    stale_before = timezone.now() - timedelta(seconds=settings.UPLOAD_STALE_AFTER_S)
    removed: list[Removal] = []

    def remove(path, reason: str, upload: Upload | None = None) -> None:  # type: ignore[no-untyped-def]
        removed.append(_remove(path, reason, upload))

    uploads = {str(u.id): u for u in Upload.objects.exclude(state__in=ENDED)}
    for root in sorted(roots):
        for entry in sorted(Path(root).iterdir()):
            if entry.name == ".locks":
                continue
            if entry.name.startswith(".trash-"):
                remove(entry, "left over from a version deletion")
                continue
            try:
                key = str(uuid.UUID(entry.name))
            except ValueError:
                continue  # not ours: leave it alone
            upload = uploads.get(key)
            if upload is None:
                ended = Upload.objects.filter(pk=key).first()
                reason = f"upload {ended.state}" if ended else "no upload row"
                remove(entry, reason, ended)
    for upload in uploads.values():
        try:
            server = staging.server_of_upload(upload)
            folder = staging.upload_dir(upload)
        except UploadError as exc:
            Upload.objects.filter(pk=upload.pk).update(
                state=Upload.State.FAILED, message=exc.message, finished_at=timezone.now()
            )
            _audit(upload, f"upload failed: {exc.message}")
            continue
        if upload.state == Upload.State.PROCESSING and (
            startup or upload.updated_at < stale_before
        ):
            removed.append(settle_processing(upload, server, folder))
        elif upload.state == Upload.State.RECEIVING and upload.updated_at < stale_before:
            Upload.objects.filter(pk=upload.pk).update(
                state=Upload.State.EXPIRED,
                message=f"no chunk for {settings.UPLOAD_STALE_AFTER_S} s: removed",
                finished_at=timezone.now(),
            )
            remove(folder, "idle for too long", upload)
    return removed


def _remove(path: Path, reason: str, upload: Upload | None) -> Removal:
    size = _size(path) if path.exists() else 0
    shutil.rmtree(path, ignore_errors=True)
    if upload is not None:
        with contextlib.suppress(UploadError):
            staging.remove_staging(upload)
    log.warning("upload reconciler removed %s (%s, %d bytes)", path, reason, size)
    _audit(upload, f"stale staging removed: {path} ({reason}, {size} bytes)")
    return Removal(str(path), reason, size)


def settle_processing(
    upload: Upload, server: servers.Server | None = None, folder: Path | None = None
) -> Removal:
    """An upload left PROCESSING by a process (or a publish job's worker) that stopped: if
    its version folder is in the repository, the rename happened and it is published;
    otherwise it failed, nothing was published. Its staging folder is removed."""
    server = server or staging.server_of_upload(upload)
    folder = folder or staging.upload_dir(upload)
    target = server.repository / upload.model
    if upload.version and not upload.new_model:
        target = target / str(upload.version)
    prepared = folder / ("model" if upload.new_model else "version")
    if upload.version and target.is_dir() and not prepared.exists():
        Upload.objects.filter(pk=upload.pk).update(
            state=Upload.State.PUBLISHED,
            message=f"published as version {upload.version} (found by the reconciler)",
            finished_at=timezone.now(),
        )
        return _remove(folder, "published before the process stopped", upload)
    Upload.objects.filter(pk=upload.pk).update(
        state=Upload.State.FAILED,
        message="the server stopped while publishing; nothing was published: upload again",
        version=None,
        finished_at=timezone.now(),
    )
    return _remove(folder, "interrupted while publishing", upload)


def _audit(upload: Upload | None, detail: str) -> None:
    from team import audit

    audit.record(
        None,
        "upload",
        model_name=upload.model if upload else "",
        server=upload.server if upload else "",
        target=f"upload {upload.id}" if upload else "staging",
        outcome="failed",
        detail=detail,
    )
