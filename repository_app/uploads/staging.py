"""Upload sessions and their staged bytes.

An upload is created with its target (model, version, backend), file name and declared size;
the limits and permissions are checked then, before any byte is stored. Chunks are appended
to ``<staging>/<id>/data`` only at the expected offset: the staged file's size, read under an
exclusive lock, is the offset (the database's ``received`` only mirrors it for listings).

sha256: computed while the chunks stream in, in the web process that receives them. The
hash state cannot be stored, so it is kept in memory next to the offset it covers; when the
next chunk arrives at another process, or after a restart, that state is dropped and the
staged file is hashed once when the upload completes. Either way the digest covers exactly
the bytes on disk.

An upload goes to one server's repository (``Upload.server``): its staging folder is that
repository's (``disk.staging_folder``), found again from the row for every chunk.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from common import preallocate
from registry import server_rules, servers
from registry.servers import Server
from team.roles import who_can

from ..disk import flock, staging_folder, version_numbers
from ..models import Upload
from ..naming import InvalidModelName
from ..repository import CONFIG_FILE, OUTSIDE_ROOTS, RepositoryError, model_folder, read_config
from . import names

CODE_PERMISSION = "team.upload_code"
UPLOAD_PERMISSION = "team.upload_models"
READ_BLOCK = 1024 * 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")
DISK_FULL = preallocate.DISK_FULL


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes | memoryview: ...


class UploadError(Exception):
    """Refused; nothing was stored. ``status`` is the HTTP status that fits, ``field`` the
    request field (or header) at fault, when one is."""

    def __init__(
        self, message: str, status: int = 400, *, field: str | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field
        self.extra = extra


# --- places on disk ---------------------------------------------------------------------


def staging_root(server: Server) -> Path:
    """The staging folder of the server's repository: outside it, on its file system. A
    repository outside MODEL_REPOSITORY_ROOTS (stored before they changed) takes no upload."""
    if server_rules.outside_roots(server.repository):
        raise UploadError(OUTSIDE_ROOTS, 409)
    repo = server.repository.resolve()
    root = staging_folder(server.repository)
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    if root == repo or repo in root.parents:
        raise UploadError(
            f"the staging folder (UPLOAD_STAGING_DIR) {root} is inside the model repository "
            f"{repo}: Triton would see half-written uploads; move it next to the repository",
            500,
        )
    if repo.exists() and os.stat(root).st_dev != os.stat(repo).st_dev:
        raise UploadError(
            f"the staging folder (UPLOAD_STAGING_DIR) {root} is not on the file system of the "
            f"model repository {repo}: publishing renames folders, which only works on one "
            "file system",
            500,
        )
    return root


def server_of_upload(upload: Upload) -> Server:
    """The server the upload goes to; UploadError when it was removed meanwhile."""
    try:
        return servers.get(upload.server)
    except servers.UnknownServer as exc:
        raise UploadError(f"{exc.message}: this upload's server was removed", 409) from None


def upload_dir(upload: Upload) -> Path:
    return staging_root(server_of_upload(upload)) / str(upload.id)


def data_path(upload: Upload) -> Path:
    return upload_dir(upload) / "data"


class _Recent:
    """What this process last found per upload, for the most recent ``size`` uploads,
    shared by the web server's threads (the running hashes, the lock paths)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, upload_id: object, value: Any) -> None:
        with self._lock:
            self._items[str(upload_id)] = value
            self._items.move_to_end(str(upload_id))
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def get(self, upload_id: object) -> Any:
        with self._lock:
            return self._items.get(str(upload_id))

    def pop(self, upload_id: object) -> Any:
        with self._lock:
            return self._items.pop(str(upload_id), None)


_lock_paths = _Recent(1024)


def lock_path(upload: Upload) -> Path:
    """Where the upload's lock is, from its server's staging folder; remembered in this
    process (``known_lock_path``), so a chunk can take the lock before it reads the row."""
    path = staging_root(server_of_upload(upload)) / ".locks" / f"upload-{upload.id}.lock"
    _lock_paths.put(upload.id, path)
    return path


def known_lock_path(upload_id: object) -> Path | None:
    """The lock path last found for the upload in this process (None: never here). Its
    server's repository may have moved since: whoever locks it checks again (chunks.locked)."""
    return _lock_paths.get(upload_id)  # type: ignore[no-any-return]


def upload_lock(upload: Upload) -> contextlib.AbstractContextManager[None]:
    """One writer per upload (chunks, completion, abort), across processes."""
    return flock(lock_path(upload))


def check_owned(user: Any, upload: Upload | None) -> Upload:
    """``upload`` when it is the user's (admins see all); 404 otherwise, so ids cannot be
    probed, and for one to a server hidden from the user (narrowed to none)."""
    from registry import server_access

    if upload is None or not (user.is_superuser or upload.user_id == user.pk):
        raise UploadError("no such upload", 404)
    if upload.server in server_access.hidden_names(user):
        raise UploadError("no such upload", 404)
    return upload


def remove_staging(upload: Upload) -> None:
    shutil.rmtree(upload_dir(upload), ignore_errors=True)
    with contextlib.suppress(OSError):
        lock_path(upload).unlink()
    forget_hash(upload.id)


# --- running sha256 ----------------------------------------------------------------------

_hashes = _Recent(256)  # upload id -> (the offset it covers, the running sha256)


def take_hash(upload_id: object, offset: int) -> Any:
    """The running hash that covers exactly ``offset`` bytes, or None."""
    entry = _hashes.pop(upload_id)
    if entry is not None and entry[0] == offset:
        return entry[1]
    return hashlib.sha256() if offset == 0 else None


def keep_hash(upload_id: object, offset: int, digest: Any) -> None:
    _hashes.put(upload_id, (offset, digest))


def forget_hash(upload_id: object) -> None:
    _hashes.pop(upload_id)


def final_sha256(upload: Upload) -> tuple[str, bool]:
    """(hex digest of the staged file, whether it was computed while streaming)."""
    path = data_path(upload)
    size = path.stat().st_size
    digest = take_hash(upload.id, size) if size else hashlib.sha256()
    if digest is not None:
        return digest.hexdigest(), True
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(READ_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest(), False


# --- creating an upload ------------------------------------------------------------------


def existing_folder(server: Server, model: str) -> Path:
    """The model's folder inside the server's repository (never through a link out of it)."""
    try:
        return model_folder(model, server.repository)
    except InvalidModelName as exc:
        raise UploadError(str(exc), field="model") from exc
    except RepositoryError as exc:
        if (server.repository / model).is_symlink():
            raise UploadError(str(exc), 409, field="model") from exc
        raise UploadError(
            f"no model folder '{model}' in the repository: create the model first",
            404,
            field="model",
        ) from exc


def model_backend(server: Server, model: str) -> names.BackendFiles:
    """The files the model's backend loads (from its config.pbtxt)."""
    folder = existing_folder(server, model)
    config, error = read_config(folder / CONFIG_FILE)
    if config is None:
        raise UploadError(
            f"{model}/{CONFIG_FILE} does not parse ({error}): fix it in the config editor "
            "before uploading versions",
            409,
        )
    try:
        return names.backend_files(
            names.backend_key_of(config.backend, config.platform, config.default_model_filename)
        )
    except names.InvalidName as exc:
        raise UploadError(str(exc)) from exc


def existing_versions(server: Server, model: str) -> list[int]:
    return version_numbers(existing_folder(server, model))


def check_may_upload(user: Any, *, is_code: bool, server: Server) -> None:
    """The role check of every step of an upload (create, each chunk, complete) on the
    upload's server: a user demoted, or narrowed on that server, meanwhile cannot go on
    sending or publishing. The files land in the server's repository, so the permission
    must hold on every server that serves from it (``server_access.repository_refusal``);
    a server narrowed to none for the user is refused as if it did not exist."""
    from registry import server_access

    if user is None or not getattr(user, "is_active", False):
        raise UploadError("your account is not active", 403)
    if not server_access.visible(user, server):
        raise UploadError(servers.UnknownServer(server.name).message, 404)
    refused = server_access.repository_refusal(
        user,
        UPLOAD_PERMISSION,
        server,
        f"your role cannot upload models ({who_can(UPLOAD_PERMISSION)})",
    )
    if refused:
        raise UploadError(refused, 403)
    if is_code:
        refused = server_access.repository_refusal(
            user,
            CODE_PERMISSION,
            server,
            f"{who_can(CODE_PERMISSION, capital=True)} upload code (Python, DALI pipelines, "
            "scripts, shared objects): it runs on the Triton host",
        )
        if refused:
            raise UploadError(refused, 403)


def check_may_continue(user: Any, upload: Upload) -> None:
    """``check_may_upload`` for a step of an existing upload, on the server it goes to."""
    check_may_upload(user, is_code=upload.is_code, server=server_of_upload(upload))


def _text(value: object, field: str, *, required: bool = True) -> str:
    """A JSON field that must be a string (never a list, a number or null coerced to one)."""
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        shown = "null" if value is None else type(value).__name__
        raise UploadError(f"{field} must be a string, got {shown}", field=field)
    return value


def _flag(value: object, field: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in (
        "",
        "0",
        "1",
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
    ):
        return value.lower() in ("1", "true", "yes", "on")
    raise UploadError(f"{field} must be true or false, got {value!r}", field=field)


def create_upload(
    user: Any,
    *,
    server: Server,
    model: object,
    filename: object,
    size: object,
    new_model: object = False,
    backend: object = "",
    version: object = None,
    sha256: object = "",
) -> Upload:
    """Check everything that can be checked before the bytes arrive; create the session
    of an upload into ``server``'s repository. Values come from JSON or a form: each is
    checked for its type, and a refusal names its field."""
    check_may_upload(user, is_code=False, server=server)
    model = _text(model, "model")
    filename = _text(filename, "filename")
    backend = _text(backend, "backend", required=False)
    sha256 = _text(sha256, "sha256", required=False)
    new_model = _flag(new_model, "new_model")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int | str)):
        raise UploadError(f"version must be a whole number, got {version!r}", field="version")
    for field, check in (
        ("model", lambda: names.check_model_name(model)),
        ("version", lambda: names.parse_version(version) if version not in (None, "") else None),
        ("backend", lambda: names.backend_files(backend) if new_model else None),
    ):
        try:
            check()
        except names.InvalidName as exc:
            raise UploadError(str(exc), field=field) from exc
    requested = names.parse_version(version) if version not in (None, "") else None
    if new_model:
        files = names.backend_files(backend)
        if (server.repository / model).exists() or (server.repository / model).is_symlink():
            raise UploadError(
                f"model '{model}' already exists: upload a new version of it instead",
                409,
                field="model",
            )
        if requested not in (None, 1):
            raise UploadError("a new model starts at version 1", field="version")
    else:
        files = model_backend(server, model)
        if requested is not None and requested in existing_versions(server, model):
            raise UploadError(
                f"version {requested} of '{model}' already exists: choose a free number or "
                "leave it empty for the next one",
                409,
                field="version",
            )
    try:
        is_archive = names.check_upload_filename(files, filename, new_model=new_model)
    except names.InvalidName as exc:
        raise UploadError(str(exc), field="filename") from exc
    # By the name as uploaded: a .py stored as model.onnx is still code.
    is_code = files.code or names.is_code_name(filename)
    check_may_upload(user, is_code=is_code, server=server)
    declared = _check_size(size, is_archive)
    digest = sha256.strip().lower()
    if digest and not _SHA256.fullmatch(digest):
        raise UploadError("sha256 must be 64 hexadecimal characters", field="sha256")
    root = staging_root(server)
    free = shutil.disk_usage(root).free
    if declared > free:
        raise UploadError(
            f"not enough disk space for {declared} bytes in the staging folder ({free} bytes free)",
            507,
            field="size",
        )
    upload = Upload.objects.create(
        user=user if getattr(user, "pk", None) else None,
        username=user.get_username(),
        server=server.name,
        model=model,
        new_model=new_model,
        backend=backend if new_model else files.platform or files.backend,
        requested_version=1 if new_model else requested,
        filename=filename,
        is_archive=is_archive,
        is_code=is_code,
        size=declared,
        client_sha256=digest,
    )
    folder = upload_dir(upload)
    folder.mkdir(mode=0o700)
    lock_path(upload)  # remembered: this process's first chunk reads the row once
    fd = os.open(data_path(upload), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        preallocate.reserve(fd, 0, declared)
    except OSError as exc:  # another writer took the space since the check above
        upload.delete()
        shutil.rmtree(folder, ignore_errors=True)
        raise UploadError(
            f"not enough disk space for {declared} bytes in the staging folder ({exc.strerror})",
            507,
            field="size",
        ) from exc
    finally:
        os.close(fd)
    return upload


def _check_size(size: object, is_archive: bool) -> int:
    if isinstance(size, bool) or not isinstance(size, int | str):
        raise UploadError(f"size must be a whole number of bytes, got {size!r}", field="size")
    try:
        declared = int(str(size))
    except ValueError:
        raise UploadError(
            f"size must be a whole number of bytes, got {size!r}", field="size"
        ) from None
    if declared <= 0:
        raise UploadError(
            "size must be at least 1 byte: empty model files are refused", field="size"
        )
    if not is_archive and declared > settings.UPLOAD_MAX_FILE_BYTES:
        raise UploadError(
            f"the file is {declared} bytes, over the per-file limit of "
            f"{settings.UPLOAD_MAX_FILE_BYTES} bytes (UPLOAD_MAX_FILE_BYTES)",
            413,
            field="size",
        )
    if declared > settings.UPLOAD_MAX_TOTAL_BYTES:
        raise UploadError(
            f"the upload is {declared} bytes, over the limit of "
            f"{settings.UPLOAD_MAX_TOTAL_BYTES} bytes (UPLOAD_MAX_TOTAL_BYTES)",
            413,
            field="size",
        )
    return declared


# --- chunks (the rest: chunks.py) ---------------------------------------------------------


def current_offset(upload: Upload) -> int:
    try:
        return data_path(upload).stat().st_size
    except FileNotFoundError:
        return 0
