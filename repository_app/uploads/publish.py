"""Verify a complete upload, prepare its version folder in staging, publish it by one rename.

Order of a completion (``complete``), each step under the upload's lock:
1. sha256 of the staged bytes (from the running hash or one read), checked against the
   client's checksum;
2. the version folder is prepared in staging: a single file is hard-linked in, an archive
   is scanned, then extracted; the backend's files must be there, ONNX must parse, code
   needs team.upload_code; a new model gets its config.pbtxt and ``1/``;
3. every file and folder of it is fsynced;
4. under the per-model lock, with Triton's state of the model neither LOADING nor
   UNLOADING, the version number is chosen (the next free one unless requested), recorded,
   and the folder is renamed into the repository with RENAME_NOREPLACE; the parent folder
   is fsynced.
A crash before the rename leaves no version; after it, a complete one. Bad input fails the
upload and removes its staging data; a busy model or a failed write leaves the upload
complete and ready to be published again.

An upload publishes into its server's repository (``Upload.server``); the busy check asks
every server that serves from that repository (``sharing``), since a shared repository's
change reaches all of them. Deleting versions and models: ``deleting``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.servers import Server
from team.roles import who_can

from ..disk import fsync_dir, fsync_tree, model_lock, rename_noreplace
from ..models import PublishJob, Upload
from ..repository import CONFIG_FILE
from . import archives, generate, names, staging
from .sharing import announce, check_not_busy
from .staging import UploadError

log = logging.getLogger(__name__)


@dataclass
class Published:
    upload: Upload
    version: int
    sha256: str
    config_generated: bool = False
    findings: list[Any] = field(default_factory=list)


def start_complete(upload: Upload, user: Any) -> PublishJob:
    """Queue ``complete`` as a job (large uploads take a while to hash): a worker of the
    upload's server's queue runs it (`publish_job`)."""
    from jobs import lifecycle

    staging.check_may_continue(user, upload)
    _mark_processing(upload)
    with transaction.atomic():
        job = PublishJob.objects.create(
            upload=upload,
            user=user if getattr(user, "pk", None) else None,
            queued_at=timezone.now(),
        )
        lifecycle.enqueue_on_commit(lifecycle.KINDS["publish"], job.pk)
    return job


def _mark_processing(upload: Upload) -> None:
    with staging.upload_lock(upload):
        upload.refresh_from_db()
        if upload.state != Upload.State.RECEIVING:
            raise UploadError(f"the upload is {upload.get_state_display()}", 409)
        offset = staging.current_offset(upload)
        if offset != upload.size:
            raise UploadError(
                f"the upload holds {offset} of {upload.size} bytes: send the rest from "
                f"offset {offset}",
                409,
                expected_offset=offset,
            )
        Upload.objects.filter(pk=upload.pk).update(
            state=Upload.State.PROCESSING, message="verifying", updated_at=timezone.now()
        )
        upload.state = Upload.State.PROCESSING


def complete(upload: Upload, user: Any, *, already_marked: bool = False) -> Published:
    """Verify and publish a fully received upload (see the module docstring)."""
    if not already_marked:
        staging.check_may_continue(user, upload)
        _mark_processing(upload)
    started = time.monotonic()
    try:
        # Again in the thread that publishes: the role may have changed since the request.
        staging.check_may_continue(user, upload)
        with staging.upload_lock(upload):
            return _verify_and_publish(upload, user, started)
    except UploadError as exc:
        retry = bool(exc.extra.get("retry"))
        _finish(upload, user, exc.message, retry=retry, started=started)
        raise
    except BaseException as exc:
        # A crash (or an interpreter exit) leaves the row PROCESSING: the reconciler
        # cleans it at the next start. Ordinary errors are reported like refusals.
        if isinstance(exc, Exception):
            message = f"publishing failed: {exc}"
            _finish(upload, user, message, retry=isinstance(exc, OSError), started=started)
            raise UploadError(message, 500) from exc
        raise


def _finish(upload: Upload, user: Any, message: str, *, retry: bool, started: float) -> None:
    """Record a failed completion: retryable ones go back to RECEIVING (bytes kept)."""
    staged_version = staging.upload_dir(upload) / "version"
    staged_model = staging.upload_dir(upload) / "model"
    for folder in (staged_version, staged_model):
        shutil.rmtree(folder, ignore_errors=True)
    if retry:
        Upload.objects.filter(pk=upload.pk).update(
            state=Upload.State.RECEIVING, message=message, version=None, updated_at=timezone.now()
        )
    else:
        staging.remove_staging(upload)
        Upload.objects.filter(pk=upload.pk).update(
            state=Upload.State.FAILED, message=message, finished_at=timezone.now()
        )
    upload.refresh_from_db()
    audit_upload(user, upload, "failed", message, time.monotonic() - started)


def _verify_and_publish(upload: Upload, user: Any, started: float) -> Published:
    digest, streamed = staging.final_sha256(upload)
    Upload.objects.filter(pk=upload.pk).update(sha256=digest)
    upload.sha256 = digest
    if upload.client_sha256 and upload.client_sha256 != digest:
        raise UploadError(
            f"sha256 mismatch: you declared {upload.client_sha256}, the server received "
            f"{digest}; nothing was published",
            422,
        )
    server = staging.server_of_upload(upload)
    files = _backend(server, upload)
    version_dir = staging.upload_dir(upload) / "version"
    with _disk_full_is_507():
        shutil.rmtree(version_dir, ignore_errors=True)
        _prepare_version(upload, user, files, version_dir)
        generated: generate.GeneratedConfig | None = None
        if upload.new_model:
            model_dir = staging.upload_dir(upload) / "model"
            shutil.rmtree(model_dir, ignore_errors=True)
            try:
                generated = generate.generate(upload.model, files, version_dir)
            except ValueError as exc:
                raise UploadError(str(exc), 422) from exc
            model_dir.mkdir(mode=0o755)
            (model_dir / CONFIG_FILE).write_text(generated.text, encoding="utf-8")
            os.chmod(model_dir / CONFIG_FILE, 0o644)
            os.rename(version_dir, model_dir / "1")
            fsync_tree(model_dir)
        else:
            fsync_tree(version_dir)
    version = _publish(server, upload, generated is not None)
    message = f"published as version {version}"
    stored = _stored_name(upload, files)
    if stored != upload.filename:
        message += f"; stored as {stored}, the name Triton loads (uploaded as {upload.filename})"
    if generated is not None:
        message += (
            "; config.pbtxt generated from the ONNX graph"
            if generated.from_model
            else "; skeleton config.pbtxt written: complete it in the config editor"
        )
    Upload.objects.filter(pk=upload.pk).update(
        state=Upload.State.PUBLISHED,
        version=version,
        message=message,
        finished_at=timezone.now(),
    )
    upload.refresh_from_db()
    staging.remove_staging(upload)
    how = "while streaming" if streamed else "after the last chunk"
    audit_upload(
        user, upload, "ok", f"version {version} published (sha256 computed {how})",
        time.monotonic() - started,
    )  # fmt: skip
    announce(server, upload.model)
    return Published(
        upload,
        version,
        digest,
        config_generated=bool(generated and generated.from_model),
        findings=generated.findings if generated else [],
    )


@contextlib.contextmanager
def _disk_full_is_507() -> Iterator[None]:
    """A full disk while the version is prepared in staging: 507, the upload is kept (its
    half-prepared folder is removed by ``_finish``) so it can be completed again."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in staging.DISK_FULL:
            raise
        raise UploadError(
            f"the disk is full ({exc.strerror}) while preparing the version in staging: "
            "nothing was published; free space and complete the upload again, or abort it",
            507,
            retry=True,
        ) from exc


def _backend(server: Server, upload: Upload) -> names.BackendFiles:
    if upload.new_model:
        return names.backend_files(upload.backend)
    return staging.model_backend(server, upload.model)


def _stored_name(upload: Upload, files: names.BackendFiles) -> str:
    """The name a single uploaded file gets in the version folder: the backend's default
    (what Triton opens) for a new model uploaded under another name, else its own."""
    if upload.is_archive or upload.filename in files.single_files:
        return upload.filename
    return files.default_name


def _prepare_version(
    upload: Upload, user: Any, files: names.BackendFiles, version_dir: Path
) -> None:
    data = staging.data_path(upload)
    if upload.is_archive:
        kind = names.archive_suffix(upload.filename)
        try:
            scanned = archives.scan(data, kind)
            strip, add = archives.layout(scanned, files)
        except archives.ArchiveError as exc:
            raise UploadError(f"archive refused, nothing was extracted: {exc}", 422) from exc
        _check_code(user, upload, scanned.code_reason)
        needed = scanned.total - shutil.disk_usage(data.parent).free
        if needed > 0:
            raise UploadError(
                f"not enough disk space to extract {scanned.total} bytes: nothing was "
                "published; free space and complete the upload again, or abort it",
                507,
                retry=True,
            )
        try:
            archives.extract(data, scanned, version_dir, strip, add)
        except archives.ArchiveError as exc:
            raise UploadError(f"archive refused: {exc}", 422) from exc
        # What the names and modes did not show: scripts and binaries by their first bytes.
        sniffed = "" if scanned.has_code else archives.code_by_content(version_dir)
        _check_code(user, upload, sniffed)
        if (scanned.has_code or sniffed) and not upload.is_code:
            Upload.objects.filter(pk=upload.pk).update(is_code=True)
    else:
        version_dir.mkdir(mode=0o755)
        stored = version_dir / _stored_name(upload, files)
        # Same inode, no copy: the staging entry disappears when the upload is cleaned.
        os.link(data, stored)
        os.chmod(stored, 0o644)
    if files.backend == "onnxruntime":
        try:
            generate.read_onnx(version_dir / files.default_name)
        except ValueError as exc:
            raise UploadError(f"{files.default_name} does not parse as ONNX: {exc}", 422) from exc


def _check_code(user: Any, upload: Upload, reason: str) -> None:
    """Code found in an archive ("" for none) needs team.upload_code."""
    if not reason:
        return
    try:
        staging.check_may_upload(user, is_code=True, server=staging.server_of_upload(upload))
    except UploadError as exc:
        raise UploadError(
            f"the archive holds code ({reason}), which runs on the Triton host: "
            f"{who_can(staging.CODE_PERMISSION)} upload it",
            exc.status,
        ) from None


def _publish(server: Server, upload: Upload, new_model: bool) -> int:
    root = server.repository
    source = staging.upload_dir(upload) / ("model" if new_model else "version")
    with model_lock(root, upload.model):
        check_not_busy(server, upload.model)
        model_dir = root / upload.model
        if new_model:
            version = 1
            target = model_dir
        else:
            try:
                model_dir = staging.existing_folder(server, upload.model)  # never through a link
            except UploadError as exc:
                if exc.status != 404:
                    raise
                raise UploadError(f"model '{upload.model}' was deleted meanwhile", 409) from None
            existing = staging.existing_versions(server, upload.model)
            version = upload.requested_version or (max(existing, default=0) + 1)
            target = model_dir / str(version)
        # Recorded first: a crash right after the rename is recognised by the reconciler.
        Upload.objects.filter(pk=upload.pk).update(version=version)
        try:
            rename_noreplace(source, target)
        except FileExistsError as exc:
            what = f"model '{upload.model}'" if new_model else f"version {version}"
            raise UploadError(f"{what} already exists: nothing was published", 409) from exc
        with contextlib.suppress(OSError):
            fsync_dir(target.parent)
    return version


def audit_upload(user: Any, upload: Upload, outcome: str, message: str, duration: float) -> None:
    from team import audit

    detail = (
        f"{message}; file {upload.filename}, {upload.size} bytes, sha256 "
        f"{upload.sha256 or '-'}, {duration:.1f} s"
    )
    if upload.client_sha256:
        detail += f", client sha256 {upload.client_sha256}"
    audit.record(
        user or upload.username or "system",
        "upload",
        model_name=upload.model,
        server=upload.server,
        target=f"version {upload.version}" if upload.version else f"upload {upload.id}",
        outcome=outcome,
        detail=detail,
        after_sha256=upload.sha256,
    )
