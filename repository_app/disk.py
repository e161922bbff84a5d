"""Writing the model repository: its on-disk rules and primitives, in one place.

Every writer (the config editor, upload publishes, version and model deletes) goes
through these, so they agree on what a version folder is, exclude each other per model,
and never leave half a file or half a folder where Triton can see it:

- ``version_number`` / ``version_numbers``: the version-folder rule;
- ``model_lock``: the one per-model lock;
- ``write_atomically``, ``rename_noreplace``, ``fsync_dir``, ``fsync_tree``.

Reading the repository (model folders, configs, files) is ``repository``'s job; the
model-name rule is ``naming``'s.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from common import libc

# Triton serves the sub-folders named by a positive integer. It parses "01" as 1 too (the
# validator says so as an error); the dashboard lists and writes only the canonical names.
_VERSION_NAME = re.compile(r"[1-9][0-9]*")


def version_number(name: str) -> int | None:
    """The version a folder name stands for, or None for a folder Triton does not serve."""
    return int(name) if _VERSION_NAME.fullmatch(name) else None


def version_numbers(folder: Path) -> list[int]:
    """The model folder's version numbers, ascending (a missing folder has none)."""
    found = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                number = version_number(entry.name)
                if number is not None and entry.is_dir():
                    found.append(number)
    except FileNotFoundError:
        return []
    return sorted(found)


# --- the per-model lock -------------------------------------------------------------------


def _resolved(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(path)


def staging_folder(repository: Path) -> Path:
    """Where uploads into ``repository`` are staged: UPLOAD_STAGING_DIR for MODEL_REPOSITORY
    (the environment's), else ``.staging`` beside the repository. On the repository's file
    system and shared by every process and host that writes it, so lock files live there
    too. ``uploads.staging`` checks where it is."""
    repo = _resolved(repository)
    configured = settings.UPLOAD_STAGING_DIR
    if configured and repo == _resolved(Path(settings.MODEL_REPOSITORY)):
        return Path(configured)
    return repo.parent / ".staging"


@contextlib.contextmanager
def flock(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (created if missing), across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def model_lock_path(repository: Path, model: str) -> Path:
    # By the resolved repository too: servers sharing one take the same lock, and two
    # repositories staged in one folder do not exclude each other's same-named models.
    key = f"{_resolved(repository)}\0{model}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:40]
    return staging_folder(repository) / ".locks" / f"model-{digest}.lock"


def model_lock(repository: Path, model: str) -> contextlib.AbstractContextManager[None]:
    """The one per-model lock of a repository: a config save, an upload publish and a
    version or model delete of the same model exclude each other, whichever server they
    came through. Keyed by name, because the model folder may not exist yet (a new model)
    or be moved away meanwhile (a delete); Triton never sees it. Not re-entrant: take it
    once per action."""
    return flock(model_lock_path(repository, model))


# --- writing without half states ------------------------------------------------------------


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never half.

    Temp file in the same folder (same file system, so the rename is atomic), full write,
    fsync, rename, fsync of the folder; keeps the old file's permission bits. An OSError
    leaves the old file as it was and no temp file behind.
    """
    folder = path.parent
    tmp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    # The rename is done; a failing folder fsync only weakens durability, not atomicity.
    with contextlib.suppress(OSError):
        fsync_dir(folder)


_RENAMEAT2 = libc.function("renameat2")
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def rename_noreplace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``; fails with FileExistsError if ``target`` exists
    (renameat2 RENAME_NOREPLACE; an existence check plus rename where it is missing)."""
    if _RENAMEAT2 is not None:
        result = _RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target),
                      _RENAME_NOREPLACE)  # fmt: skip
        if result == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS):  # file systems without the flag
            raise OSError(code, os.strerror(code), str(target))
    if target.exists():
        raise FileExistsError(errno.EEXIST, "exists", str(target))
    os.rename(source, target)


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` (and root itself), files first."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for filename in filenames:
            fd = os.open(os.path.join(dirpath, filename), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for dirpath, _dirnames, _filenames in os.walk(root, topdown=False):
        fsync_dir(Path(dirpath))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
