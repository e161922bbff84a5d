"""Writing config.pbtxt: atomic replace, optimistic concurrency on sha256, revision history.

Every function takes the server the editor was opened for: its repository is where the
file is, its Triton what the validator judges against; history (``ConfigRevision``) is kept
per repository (``servers.repository_key``), so servers sharing a repository share it.

- ``read_current(name, server)`` reads the file as it is now (bytes, text, sha256).
- ``save_config(name, text, server=..., base_sha256=..., ...)`` validates, refuses when the file changed
  since ``base_sha256`` (``SaveConflict``), writes atomically (``atomic_write``) and records a
  ``ConfigRevision``. Errors block the save (``InvalidConfig``); warnings come back.
- ``record_disk_change(name)`` records a ``disk`` revision when the file on disk differs from
  the latest revision (edits made outside the dashboard); every save calls it first, and the
  workers' watchdog calls ``record_outside_edits`` for every repository. Pages only read:
  ``unrecorded`` tells them the file on disk is not in the history yet.
- ``restore_revision`` saves an old revision's text again as a new ``restore`` revision.

Nothing here half-writes: the new content goes to a temp file in the same folder, is
fsynced, renamed over config.pbtxt (atomic on POSIX), and the folder is fsynced. Any
OSError (disk full, read-only, permissions) becomes ``SaveError`` and leaves the old file.
"""

from __future__ import annotations

import errno
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from django.db import transaction
from tritonclient.grpc import model_config_pb2 as pb

from registry.servers import Server, repository_key

from ..disk import model_lock, write_atomically
from ..modelconfig import Finding, ServerFacts, code_loading, parse_config, validate_text
from ..modelconfig.findings import ERROR, has_errors, sort_findings
from ..modelconfig.parsing import MAX_CONFIG_BYTES
from ..models import ConfigRevision
from ..repository import CONFIG_FILE, OUTSIDE, RepositoryError, leaves, model_folder

Source = ConfigRevision.Source


class SaveConflict(Exception):
    """The file changed since the editor opened it; nothing was written."""

    def __init__(self, current: CurrentConfig) -> None:
        super().__init__(f"{CONFIG_FILE} changed on disk since you opened it")
        self.current = current


class SaveError(Exception):
    """Writing failed (disk full, permissions, ...); the old file is untouched."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CodeChangeRefused(Exception):
    """The change would make Triton load or run other code and the author may not make it
    (team.upload_code); nothing was written. ``changes`` says what, in words."""

    def __init__(self, changes: list[str]) -> None:
        self.changes = changes
        self.message = code_loading.refusal(changes)
        self.field = changes[0].split(" ", 1)[0]  # e.g. "backend", "parameters"
        super().__init__(self.message)


class InvalidConfig(Exception):
    """The validator found errors; nothing was written."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__("the config has errors")
        self.findings = findings


@dataclass(frozen=True)
class CurrentConfig:
    """config.pbtxt as it is on disk now (``exists`` False when the file is missing)."""

    path: Path
    data: bytes
    sha256: str
    exists: bool = True

    @property
    def text(self) -> str:
        return decode_for_display(self.data)


@dataclass
class SaveResult:
    revision: ConfigRevision | None  # None when the text equals the file (nothing to save)
    previous: ConfigRevision | None  # the revision the file held before this save
    findings: list[Finding] = field(default_factory=list)  # warnings that did not block

    @property
    def changed(self) -> bool:
        return self.revision is not None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decode_for_display(data: bytes) -> str:
    """Text for showing and for history rows (bad bytes become U+FFFD)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data.decode("utf-8", errors="replace")


def model_dir(name: str, server: Server) -> Path:
    """The model's folder in the server's repository; RepositoryError for bad names, links
    out of the repository or missing folders."""
    return model_folder(name, server.repository)


def read_current(name: str, server: Server) -> CurrentConfig:
    folder = model_dir(name, server)
    path = folder / CONFIG_FILE
    if path.is_symlink() and leaves(path, folder.parent):
        raise RepositoryError(f"{CONFIG_FILE} of '{name}' is {OUTSIDE}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return CurrentConfig(path, b"", sha256_hex(b""), exists=False)
    except OSError as exc:
        raise SaveError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return CurrentConfig(path, data, sha256_hex(data))


def server_facts_now(server: Server) -> ServerFacts | None:
    """The server's Triton version and GPUs (read at most every 30 s; None when it does not
    answer): what every editor validation judges against, text and form mode alike."""
    from ..server_facts import server_facts

    return server_facts(server)


def editor_findings(text: str | bytes, name: str, server: Server) -> list[Finding]:
    """The validator's findings (with the attached server's GPUs when Triton answers) plus
    the editor's own refusals (empty file)."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if len(raw) > MAX_CONFIG_BYTES:
        return validate_text(raw, folder_name=name)  # the parser's "too large" finding
    if not raw.strip():
        return [
            Finding(
                ERROR,
                "editor.empty",
                "the config is empty: an empty config.pbtxt makes Triton guess everything "
                "from the model file; write at least name and backend (or platform)",
                line=1,
                col=1,
            )
        ]
    return validate_text(raw, folder_name=name, server=server_facts_now(server))


def _author(author_id: int | None):  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model

    return (
        get_user_model().objects.filter(pk=author_id, is_active=True).first() if author_id else None
    )


def _last_good_config(name: str, current: CurrentConfig, server: Server) -> pb.ModelConfig | None:
    """The config the model has now: the file, or while it does not parse the newest
    revision that does (so fixing a typo is not taken for a new backend)."""
    parsed = parse_config(current.data).config if current.exists else None
    if parsed is not None:
        return parsed
    revisions = ConfigRevision.objects.filter(repository=repository_key(server), model=name)
    for revision in revisions.order_by("-id")[:50]:
        config = parse_config(revision.text).config
        if config is not None:
            return config
    return None


def check_code_change(
    name: str,
    before: pb.ModelConfig | None,
    after: pb.ModelConfig | None,
    user: Any,
    *,
    server: Server,
) -> None:
    """Raise CodeChangeRefused when ``after`` changes what code Triton loads for the model
    and ``user`` lacks team.upload_code (no user: nobody to check, refused)."""
    if after is None:
        return
    changes = code_loading.code_changes(before, after)
    if changes and not (user is not None and user.has_perm(code_loading.CODE_PERMISSION, server)):
        from team import audit

        audit.record(
            user or "system",
            "config.save",
            model_name=name,
            server=server.name,
            outcome="denied",
            detail=code_loading.refusal(changes),
        )
        raise CodeChangeRefused(changes)


def _revisions(name: str, server: Server) -> Any:
    return ConfigRevision.objects.filter(repository=repository_key(server), model=name)


def latest_revision(name: str, server: Server) -> ConfigRevision | None:
    return _revisions(name, server).order_by("-id").first()  # type: ignore[no-any-return]


def history(name: str, server: Server) -> list[ConfigRevision]:
    return list(_revisions(name, server).select_related("author").order_by("-id"))


def unrecorded(current: CurrentConfig, latest: ConfigRevision | None) -> bool:
    """The file on disk is not the latest revision: edited outside the dashboard since (or
    never seen), and not yet recorded by the watchdog or a save."""
    return current.exists and (latest is None or latest.sha256 != current.sha256)


def record_outside_edits(server: Server) -> list[ConfigRevision]:
    """Record every model's config.pbtxt in the server's repository that differs from its
    latest revision (the watchdog's pass; one query for the latest of all models)."""
    from django.db.models import Max

    from registry.server_rules import outside_roots

    from ..repository import model_names

    if outside_roots(server.repository):
        return []  # its pages already say so; nothing to record, no warning every pass
    key = repository_key(server)
    latest_ids = (
        ConfigRevision.objects.filter(repository=key).values("model").annotate(last=Max("id"))
    )
    known = dict(
        ConfigRevision.objects.filter(id__in=[row["last"] for row in latest_ids]).values_list(
            "model", "sha256"
        )
    )
    recorded = []
    for name in model_names(server.repository):
        try:
            current = read_current(name, server)
        except (RepositoryError, SaveError):
            continue  # a bad name, a link out, an unreadable file: the pages say why
        if current.exists and known.get(name) != current.sha256:
            revision = record_disk_change(name, server, current)
            if revision is not None:
                recorded.append(revision)
    return recorded


def record_disk_change(
    name: str,
    server: Server,
    current: CurrentConfig | None = None,
    *,
    locked: bool = False,
) -> ConfigRevision | None:
    """Record the file as a ``disk`` revision when it differs from the latest revision.

    Takes the model lock (revision numbers are assigned under it) unless the caller holds
    it (``locked``, save_config). Under its own lock it reads the file again, so a save that
    landed after ``current`` was read is not recorded as a disk change."""
    if not locked:
        current = current if current is not None else read_current(name, server)
        if not current.exists:
            return None
        latest = latest_revision(name, server)
        if latest is not None and latest.sha256 == current.sha256:
            return None  # the common case, without the lock
        with model_lock(server.repository, name):
            return record_disk_change(name, server, None, locked=True)
    current = current if current is not None else read_current(name, server)
    if not current.exists:
        return None
    latest = latest_revision(name, server)
    if latest is not None and latest.sha256 == current.sha256:
        return None
    message = (
        "first version seen by the dashboard"
        if latest is None
        else "changed on disk outside the dashboard"
    )
    return ConfigRevision.objects.create(
        repository=repository_key(server),
        model=name,
        text=current.text,
        sha256=current.sha256,
        parent_sha256=latest.sha256 if latest else "",
        author=None,
        message=message,
        source=Source.DISK,
    )


def _describe_os_error(exc: OSError, path: Path) -> str:
    if exc.errno == errno.ENOSPC:
        reason = "the disk is full"
    elif exc.errno == errno.EDQUOT:
        reason = "the disk quota is exhausted"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        reason = "permission denied"
    elif exc.errno == errno.EROFS:
        reason = "the file system is read-only"
    else:
        reason = exc.strerror or str(exc)
    return f"could not write {path}: {reason}. The previous {CONFIG_FILE} is unchanged."


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (``disk.write_atomically``); SaveError says why not."""
    try:
        write_atomically(path, data)
    except OSError as exc:
        raise SaveError(_describe_os_error(exc, path)) from exc


def save_config(
    name: str,
    text: str,
    *,
    server: Server,
    base_sha256: str,
    author_id: int | None,
    source: str,
    message: str = "",
) -> SaveResult:
    """Validate and write ``text`` exactly as given into the server's repository; record a
    revision.

    Raises InvalidConfig (errors), SaveConflict (file changed since ``base_sha256``),
    CodeChangeRefused (a change to the code Triton loads, by an author without
    team.upload_code), SaveError (write failed) or RepositoryError (bad model name).
    Nothing is written in any of those cases.
    """
    findings = sort_findings(editor_findings(text, name, server))
    if has_errors(findings):
        raise InvalidConfig(findings)
    data = text.encode("utf-8")
    model_dir(name, server)  # a bad name or a missing folder fails before the lock
    action = "config.restore" if source == Source.RESTORE else "config.save"
    # The one per-model lock that upload publishes and deletes take too; the folder is
    # found again under it (a delete may have moved it away meanwhile).
    with model_lock(server.repository, name):
        current = read_current(name, server)
        if current.sha256 != base_sha256:
            # Remember what someone else wrote before refusing (the history shows it).
            record_disk_change(name, server, current, locked=True)
            _audit(
                server,
                action,
                name,
                author_id,
                "failed",
                "refused: the file changed since it was opened",
                base_sha256,
                current.sha256,
            )
            raise SaveConflict(current)
        record_disk_change(name, server, current, locked=True)
        previous = latest_revision(name, server)
        if current.exists and data == current.data:
            return SaveResult(None, previous, findings)
        check_code_change(
            name,
            _last_good_config(name, current, server),
            parse_config(data).config,
            _author(author_id),
            server=server,
        )
        try:
            atomic_write(current.path, data)
        except SaveError as exc:
            _audit(server, action, name, author_id, "failed", exc.message, current.sha256, "")
            raise
        _audit(
            server,
            action,
            name,
            author_id,
            "ok",
            f"{source}: {message}".rstrip(": "),
            current.sha256,
            sha256_hex(data),
        )
        # Still under the model lock: the revision's per-model number is max + 1.
        with transaction.atomic():
            revision = ConfigRevision.objects.create(
                repository=repository_key(server),
                model=name,
                text=text,
                sha256=sha256_hex(data),
                parent_sha256=current.sha256 if current.exists else "",
                author_id=author_id,
                message=message[:500],
                source=source,
            )
    _announce_save(server, name, revision, previous)
    return SaveResult(revision, previous, findings)


def _audit(
    server: Server,
    action: str,
    name: str,
    author_id: int | None,
    outcome: str,
    detail: str,
    before: str,
    after: str,
) -> None:
    from django.contrib.auth import get_user_model

    from team import audit

    author = get_user_model().objects.filter(pk=author_id).first() if author_id else None
    audit.record(
        author or "system",
        action,
        model_name=name,
        server=server.name,
        outcome=outcome,
        detail=detail,
        before_sha256=before,
        after_sha256=after,
    )


def _announce_save(
    server: Server, name: str, revision: ConfigRevision, previous: ConfigRevision | None
) -> None:
    """Tell everyone looking at this model's config (through any server on its repository)
    that it changed, with a link to the diff."""
    from django.urls import reverse

    from .. import events

    # No ?server= here: the event reaches the pages of every server on this repository, and
    # each socket adds its own (consumers.LiveConsumer.relay), so no page learns the name
    # of the server the save came through, which may be hidden from its reader.
    diff = ""
    if previous is not None:
        diff = f"{reverse('config_diff', args=[name])}?a={previous.pk}&b={revision.pk}"
    events.publish(
        events.config_group(revision.repository, name),
        "config.saved",
        {
            "model": name,
            "revision": revision.number,  # per model, as the pages show it
            "sha256": revision.sha256,
            "by": revision.author.get_username() if revision.author else "someone",
            "diff_url": diff,
        },
    )


def get_revision(name: str, revision_id: int, server: Server) -> ConfigRevision:
    """The revision of this model in the server's repository, or
    ConfigRevision.DoesNotExist."""
    return _revisions(name, server).select_related("author").get(pk=revision_id)  # type: ignore[no-any-return]


def restore_revision(
    name: str,
    revision_id: int,
    *,
    server: Server,
    base_sha256: str,
    author_id: int | None,
) -> SaveResult:
    """Save an old revision's text again, as a new ``restore`` revision."""
    old = get_revision(name, revision_id, server)
    return save_config(
        name,
        old.text,
        server=server,
        base_sha256=base_sha256,
        author_id=author_id,
        # TextChoices members are str; untyped Django shows mypy a (value, label) tuple.
        source=cast(str, Source.RESTORE),
        message=f"restored revision #{old.number}",
    )
