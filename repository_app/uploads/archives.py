"""Scan an archive completely before extracting anything; then extract what the scan saw.

Refused (the whole archive, nothing extracted): absolute paths, ``..``, symlinks, hard links,
device files, FIFOs, encrypted or duplicate members, more than UPLOAD_MAX_ARCHIVE_MEMBERS
members, a member over UPLOAD_MAX_FILE_BYTES or a declared uncompressed total over
UPLOAD_MAX_TOTAL_BYTES, or a total over UPLOAD_MAX_ARCHIVE_RATIO times the archive's size
past UPLOAD_ARCHIVE_RATIO_FREE_BYTES (zip bombs). Extraction writes only regular files and folders with
fixed permissions (0644 / 0755), never follows links, and stops a member that grows past
its declared size.
"""

from __future__ import annotations

import functools
import os
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from django.conf import settings

from . import names

JUNK = ("__MACOSX", ".DS_Store")
COPY_BLOCK = 1024 * 1024


class ArchiveError(ValueError):
    """The archive is refused as a whole; the message names the member and the reason."""


@dataclass(frozen=True)
class Member:
    name: str  # as stored in the archive
    parts: tuple[str, ...]
    is_dir: bool
    size: int
    executable: bool = False  # any x bit in the member's mode


@dataclass
class Scan:
    kind: str  # ".zip", ".tar" or ".tar.gz"
    members: list[Member] = field(default_factory=list)
    total: int = 0

    @property
    def code_reason(self) -> str:
        """Why the archive counts as code ("" when nothing in it does)."""
        for m in self.members:
            if not m.is_dir:
                reason = names.code_member_reason(m.parts, m.executable)
                if reason:
                    return reason
        return ""

    @property
    def has_code(self) -> bool:
        return bool(self.code_reason)

    def files(self) -> set[tuple[str, ...]]:
        return {m.parts for m in self.members if not m.is_dir}


def _limits() -> tuple[int, int, int]:
    return (
        settings.UPLOAD_MAX_ARCHIVE_MEMBERS,
        settings.UPLOAD_MAX_FILE_BYTES,
        settings.UPLOAD_MAX_TOTAL_BYTES,
    )


def _add(scan: Scan, name: str, is_dir: bool, size: int, mode: int = 0) -> None:
    max_members, max_file, max_total = _limits()
    if len(scan.members) >= max_members:
        raise ArchiveError(
            f"the archive has more than {max_members} members (UPLOAD_MAX_ARCHIVE_MEMBERS)"
        )
    try:
        parts = names.check_member_path(name)
    except names.InvalidName as exc:
        raise ArchiveError(str(exc)) from exc
    if not parts or parts[0] in JUNK or parts[-1] in JUNK:
        return
    if size < 0 or size > max_file:
        raise ArchiveError(
            f"archive member {name!r} is {size} bytes uncompressed, over the per-file limit "
            f"of {max_file} bytes (UPLOAD_MAX_FILE_BYTES)"
        )
    scan.total += size
    if scan.total > max_total:
        raise ArchiveError(
            f"the archive unpacks to more than {max_total} bytes (UPLOAD_MAX_TOTAL_BYTES): "
            "refused before extracting anything"
        )
    seen = {m.parts: m for m in scan.members}
    if parts in seen:
        if is_dir and seen[parts].is_dir:
            return
        raise ArchiveError(f"archive member {name!r} appears twice")
    executable = not is_dir and bool(mode & 0o111)
    scan.members.append(Member(name, parts, is_dir, 0 if is_dir else size, executable))


def scan(path: Path, kind: str) -> Scan:
    """Read every member header; raise ArchiveError at the first refused one."""
    result = Scan(kind)
    try:
        if kind == ".zip":
            _scan_zip(path, result)
        else:
            _scan_tar(path, result)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"not a readable {kind} archive: {exc}") from exc
    _check_tree(result)
    _check_expansion(path, result)
    return result


def _check_expansion(path: Path, result: Scan) -> None:
    """Refuse an archive whose declared total is over UPLOAD_MAX_ARCHIVE_RATIO times its own
    size (once past UPLOAD_ARCHIVE_RATIO_FREE_BYTES). One that does not fit the free space is
    not refused here: publishing keeps the upload and answers 507, so it can be retried."""
    packed = max(path.stat().st_size, 1)
    ratio, free_below = settings.UPLOAD_MAX_ARCHIVE_RATIO, settings.UPLOAD_ARCHIVE_RATIO_FREE_BYTES
    if result.total > free_below and result.total > ratio * packed:
        raise ArchiveError(
            f"the archive unpacks to {result.total:,} bytes, {result.total // packed:,} times "
            f"its {packed:,} bytes: over {ratio}:1 past {free_below:,} bytes "
            "(UPLOAD_MAX_ARCHIVE_RATIO); refused before extracting anything"
        )


def _zip_entry_count(path: Path) -> int:
    """Members named by the end-of-central-directory record, read before ZipFile loads the
    whole central directory into memory."""
    with path.open("rb") as handle:
        record = zipfile._EndRecData(handle)  # type: ignore[attr-defined]
    if not record:
        raise ArchiveError("not a readable .zip archive: no end-of-central-directory record")
    return int(record[zipfile._ECD_ENTRIES_TOTAL])  # type: ignore[attr-defined]


def _scan_zip(path: Path, result: Scan) -> None:
    max_members = _limits()[0]
    count = _zip_entry_count(path)
    if count > max_members:
        raise ArchiveError(
            f"the archive has {count} members, more than {max_members} (UPLOAD_MAX_ARCHIVE_MEMBERS)"
        )
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        max_members = _limits()[0]
        if len(infos) > max_members:
            raise ArchiveError(
                f"the archive has {len(infos)} members, more than {max_members} "
                "(UPLOAD_MAX_ARCHIVE_MEMBERS)"
            )
        for info in infos:
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise ArchiveError(f"archive member {info.filename!r} is a symbolic link")
            if mode and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode)):
                raise ArchiveError(f"archive member {info.filename!r} is a device file or FIFO")
            if mode and stat.S_ISSOCK(mode):
                raise ArchiveError(f"archive member {info.filename!r} is a socket")
            if info.flag_bits & 0x1:
                raise ArchiveError(f"archive member {info.filename!r} is encrypted")
            _add(result, info.filename, info.is_dir(), info.file_size, mode)


def _tar_mode(kind: str) -> Literal["r:gz", "r:"]:
    return "r:gz" if kind == ".tar.gz" else "r:"


def _scan_tar(path: Path, result: Scan) -> None:
    with tarfile.open(path, _tar_mode(kind=result.kind)) as archive:
        for info in _iter_tar(archive):
            if info.issym():
                raise ArchiveError(f"archive member {info.name!r} is a symbolic link")
            if info.islnk():
                raise ArchiveError(f"archive member {info.name!r} is a hard link")
            if info.ischr() or info.isblk() or info.isfifo():
                raise ArchiveError(f"archive member {info.name!r} is a device file or FIFO")
            if not (info.isfile() or info.isdir()):
                raise ArchiveError(f"archive member {info.name!r} is not a file or folder")
            _add(result, info.name, info.isdir(), info.size, info.mode)


def _iter_tar(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """Members one by one (getmembers() would hold them all before the count check)."""
    while True:
        info = archive.next()
        if info is None:
            return
        yield info
        # TarFile keeps every member it read; a count check must not wait for the end.
        # typeshed does not declare TarFile.members (a plain list attribute at runtime).
        if len(archive.members) > _limits()[0] + 1:  # type: ignore[attr-defined]
            raise ArchiveError(
                f"the archive has more than {_limits()[0]} members (UPLOAD_MAX_ARCHIVE_MEMBERS)"
            )


def _check_tree(result: Scan) -> None:
    """A file may not also be a folder on the path of another member."""
    files = result.files()
    for member in result.members:
        for i in range(1, len(member.parts)):
            if member.parts[:i] in files:
                raise ArchiveError(
                    f"archive member {member.name!r} is inside {'/'.join(member.parts[:i])!r}, "
                    "which is a file"
                )


def layout(result: Scan, files: names.BackendFiles) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(prefix to strip, prefix to add) that puts the backend's required files at the top.

    Accepts the files at the top, inside one wrapping folder, and for folder formats the
    folder's content alone (``saved_model.pb`` + ``variables/`` becomes model.savedmodel/).
    """
    present = {"/".join(p) for p in result.files()}
    tops = {m.parts[0] for m in result.members}
    wrappers: list[tuple[str, ...]] = [()]
    if len(tops) == 1 and any(len(m.parts) > 1 for m in result.members):
        wrappers.append((next(iter(tops)),))
    additions: list[tuple[str, ...]] = [()]
    if files.folder:
        additions.append((files.default_name,))
    for strip in wrappers:
        for add in additions:
            mapped = set()
            for path in present:
                parts = tuple(path.split("/"))
                if parts[: len(strip)] == strip:
                    mapped.add("/".join(add + parts[len(strip) :]))
            if all(req in mapped for req in files.required):
                return strip, add
    shown = ", ".join(sorted(present)[:8]) + (" …" if len(present) > 8 else "")
    raise ArchiveError(
        f"a {files.platform or files.backend} version needs {', '.join(files.required)}; "
        f"the archive holds {shown or 'no files'}"
    )


def extract(
    path: Path, result: Scan, dest: Path, strip: tuple[str, ...], add: tuple[str, ...]
) -> int:
    """Extract the scanned members into ``dest`` (created); returns the bytes written."""
    wanted = {m.name: m for m in result.members}
    dest.mkdir(mode=0o755)
    written = 0

    def target(member: Member) -> Path | None:
        if member.parts[: len(strip)] != strip:
            return None
        rel = add + member.parts[len(strip) :]
        return dest.joinpath(*rel) if rel else None

    def write(member: Member, source: IO[bytes]) -> int:
        out = target(member)
        if out is None:
            return 0
        out.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        count = 0
        with os.fdopen(fd, "wb") as handle:
            for block in iter(lambda: source.read(COPY_BLOCK), b""):
                count += len(block)
                if count > member.size:
                    raise ArchiveError(f"archive member {member.name!r} is larger than declared")
                handle.write(block)
        return count

    try:
        for name, open_member in _entries(path, result.kind):
            member = wanted.get(name)
            if member is None:
                continue
            if member.is_dir:
                _mkdir(target(member))
                continue
            with open_member() as source:
                written += write(member, source)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise ArchiveError(f"the archive is damaged: {exc}") from exc
    return written


def _entries(path: Path, kind: str) -> Iterator[tuple[str, Callable[[], IO[bytes]]]]:
    """(name, open it) for each member of a zip or tar archive, in the archive's order."""
    if kind == ".zip":
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                yield info.filename, functools.partial(archive.open, info)
        return
    with tarfile.open(path, _tar_mode(kind)) as tar_archive:
        for tar_info in _iter_tar(tar_archive):

            def open_tar(info: tarfile.TarInfo = tar_info) -> IO[bytes]:
                source = tar_archive.extractfile(info)
                if source is None:
                    raise ArchiveError(f"archive member {info.name!r} cannot be read")
                return source

            yield tar_info.name, open_tar


_MAGIC = ((b"#!", "a script"), (b"\x7fELF", "an executable or shared object"),
          (b"MZ", "a Windows executable"), (b"\xca\xfe\xba\xbe", "a Mach-O or Java binary"))  # fmt: skip


def code_by_content(folder: Path) -> str:
    """The first extracted file whose first bytes say it is a script or a binary, as a
    reason ("" when none): `bin/activate` without a suffix or mode bit is caught by its
    name, a renamed `weights.bin` that is really an ELF file by this."""
    for dirpath, _dirnames, filenames in os.walk(folder):
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            with path.open("rb") as handle:
                head = handle.read(4)
            for magic, what in _MAGIC:
                if head.startswith(magic):
                    return f"{path.relative_to(folder)} is {what}"
    return ""


def _mkdir(path: Path | None) -> None:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
