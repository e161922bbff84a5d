"""Saving config.pbtxt: atomic writes, sha256 conflicts, revisions, disk changes, restore."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path

import pytest

from registry import servers
from repository_app import disk
from repository_app.editor import diffing, saving
from repository_app.models import ConfigRevision

from .conftest import on_repository

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
NAME = "add_batched"


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(DEMO, root)
    return root


def config_file(repo: Path) -> Path:
    return repo / NAME / "config.pbtxt"


def original_text(repo: Path) -> str:
    return config_file(repo).read_text()


def save(repo: Path, text: str, base: str | None = None, **kwargs):
    server = on_repository(repo)
    base_sha = base if base is not None else saving.read_current(NAME, server).sha256
    kwargs.setdefault("author_id", None)
    kwargs.setdefault("source", ConfigRevision.Source.TEXT)
    return saving.save_config(NAME, text, server=server, base_sha256=base_sha, **kwargs)


def leftovers(repo: Path) -> list[str]:
    return [p.name for p in (repo / NAME).iterdir() if p.name.endswith(".tmp")]


def test_a_save_writes_the_text_exactly_and_records_the_first_disk_version_and_the_save(repo):
    before = original_text(repo)
    text = before.replace("max_batch_size: 64", "max_batch_size: 32") + "# trailing comment\n"
    result = save(repo, text, message="smaller batches")
    assert config_file(repo).read_bytes() == text.encode()
    revisions = list(ConfigRevision.objects.filter(model=NAME).order_by("id"))
    assert [r.source for r in revisions] == ["disk", "text"]
    assert revisions[0].text == before and revisions[0].message.startswith("first version")
    assert revisions[1] == result.revision
    assert revisions[1].message == "smaller batches"
    assert revisions[1].sha256 == saving.sha256_hex(text.encode())
    assert revisions[1].parent_sha256 == revisions[0].sha256
    assert result.previous == revisions[0]
    assert leftovers(repo) == []


def test_a_save_writes_under_the_lock_that_upload_publishes_and_deletes_take(repo, monkeypatch):
    """One lock per model: a publish or delete of the same model cannot run mid-save."""
    taken_by_someone: list[bool] = []
    write = saving.atomic_write

    def probing_write(path: Path, data: bytes) -> None:
        fd = os.open(disk.model_lock_path(repo, NAME), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            taken_by_someone.append(True)
        else:
            taken_by_someone.append(False)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        write(path, data)

    monkeypatch.setattr(saving, "atomic_write", probing_write)
    save(repo, original_text(repo).replace("64", "32"))
    assert taken_by_someone == [True]


def test_a_save_after_the_model_was_deleted_meanwhile_writes_nothing(repo, monkeypatch):
    base = saving.read_current(NAME, on_repository(repo)).sha256
    real_lock = disk.model_lock

    def lock_then_delete(root: Path, model: str):  # type: ignore[no-untyped-def]
        shutil.rmtree(repo / NAME)  # a delete that held the lock just before this save
        return real_lock(root, model)

    monkeypatch.setattr(saving, "model_lock", lock_then_delete)
    with pytest.raises(saving.RepositoryError):
        save(repo, "max_batch_size: 8\n", base=base)
    assert not (repo / NAME).exists()


def test_the_file_keeps_its_permission_bits(repo):
    os.chmod(config_file(repo), 0o640)
    save(repo, original_text(repo).replace("64", "32"))
    assert config_file(repo).stat().st_mode & 0o777 == 0o640


def test_saving_identical_text_records_no_revision(repo):
    result = save(repo, original_text(repo))
    assert result.revision is None and not result.changed
    assert list(ConfigRevision.objects.values_list("source", flat=True)) == ["disk"]


def test_a_stale_sha_is_a_conflict_and_nothing_is_overwritten(repo):
    opened_sha = saving.read_current(NAME, on_repository(repo)).sha256
    theirs = original_text(repo).replace("500", "900")
    config_file(repo).write_text(theirs)  # someone else saved meanwhile
    with pytest.raises(saving.SaveConflict) as caught:
        save(repo, original_text(repo).replace("64", "16"), base=opened_sha)
    assert config_file(repo).read_text() == theirs
    assert caught.value.current.text == theirs
    # Their change is in the history as a disk revision; ours is not.
    assert list(ConfigRevision.objects.values_list("source", flat=True)) == ["disk"]
    assert ConfigRevision.objects.get().text == theirs


def test_changes_made_on_disk_are_recorded_once_as_disk_revisions(repo):
    first = saving.record_disk_change(NAME, on_repository(repo))
    assert first is not None and first.source == "disk"
    assert saving.record_disk_change(NAME, on_repository(repo)) is None
    changed = original_text(repo).replace("500", "700")
    config_file(repo).write_text(changed)
    second = saving.record_disk_change(NAME, on_repository(repo))
    assert second is not None
    assert second.text == changed and second.message == "changed on disk outside the dashboard"
    assert second.parent_sha256 == first.sha256
    assert saving.record_disk_change(NAME, on_repository(repo)) is None


def test_a_save_after_an_outside_edit_records_that_edit_first(repo):
    saving.record_disk_change(NAME, on_repository(repo))
    outside = original_text(repo).replace("500", "700")
    config_file(repo).write_text(outside)
    save(repo, outside.replace("64", "32"))
    sources = list(ConfigRevision.objects.order_by("id").values_list("source", flat=True))
    assert sources == ["disk", "disk", "text"]


def test_restoring_an_old_revision_creates_a_new_revision_with_its_text(repo):
    before = original_text(repo)
    save(repo, before.replace("64", "32"))
    first = ConfigRevision.objects.order_by("id").first()
    assert first is not None
    result = saving.restore_revision(
        NAME,
        first.pk,
        server=on_repository(repo),
        base_sha256=saving.read_current(NAME, on_repository(repo)).sha256,
        author_id=None,
    )
    assert config_file(repo).read_text() == before
    assert result.revision is not None and result.revision.source == "restore"
    assert result.revision.message == f"restored revision #{first.number}"
    assert ConfigRevision.objects.count() == 3


def test_a_config_with_errors_is_refused_and_nothing_is_written(repo):
    before = config_file(repo).read_bytes()
    with pytest.raises(saving.InvalidConfig) as caught:
        save(repo, original_text(repo).replace("max_batch_size: 64", "max_batch_size: 4"))
    assert any(f.rule == "dynamic-batching.preferred-above-max" for f in caught.value.findings)
    assert config_file(repo).read_bytes() == before
    assert not ConfigRevision.objects.exclude(source="disk").exists()


@pytest.mark.parametrize("failing", ["write", "fsync", "replace"])
def test_a_write_error_leaves_the_old_file_byte_identical(repo, monkeypatch, failing):
    before = config_file(repo).read_bytes()
    saving.record_disk_change(NAME, on_repository(repo))

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk.os, failing, disk_full)
    with pytest.raises(saving.SaveError) as caught:
        save(repo, original_text(repo).replace("64", "32"))
    monkeypatch.undo()
    assert "the disk is full" in caught.value.message
    assert "previous config.pbtxt is unchanged" in caught.value.message
    assert config_file(repo).read_bytes() == before
    assert leftovers(repo) == []
    assert list(ConfigRevision.objects.values_list("source", flat=True)) == ["disk"]


def test_a_short_write_is_completed_not_truncated(repo, monkeypatch):
    real_write = os.write

    def one_byte_at_a_time(fd, data):
        return real_write(fd, bytes(data[:1]))

    monkeypatch.setattr(disk.os, "write", one_byte_at_a_time)
    text = original_text(repo).replace("64", "32")
    save(repo, text)
    assert config_file(repo).read_text() == text


def test_unknown_models_and_path_tricks_are_refused(repo):
    with pytest.raises(saving.RepositoryError):
        saving.read_current("../etc", on_repository(repo))
    with pytest.raises(saving.RepositoryError):
        saving.read_current("nope", on_repository(repo))


def test_the_empty_text_is_a_clear_error():
    findings = saving.editor_findings("  \n", NAME, servers.default())
    assert [f.rule for f in findings] == ["editor.empty"]
    assert "the config is empty" in findings[0].message


def test_the_side_by_side_diff_pairs_changed_lines():
    diff = diffing.side_by_side("a\nb\nc\n", "a\nB\nc\nd\n")
    kinds = [(r.kind, r.left, r.right) for r in diff.rows]
    assert kinds == [
        ("equal", "a", "a"),
        ("replace", "b", "B"),
        ("equal", "c", "c"),
        ("insert", None, "d"),
    ]
    assert (diff.added, diff.removed) == (2, 1)
    assert diffing.side_by_side("x\n", "x\n").identical


def test_saves_and_refused_saves_are_audited_with_hashes(tmp_path, django_user_model):
    from repository_app.editor import saving
    from team.models import AuditEvent

    folder = tmp_path / "audited"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text("")
    original = 'name: "audited"\nbackend: "python"\nmax_batch_size: 4\n'
    (folder / "config.pbtxt").write_text(original)
    author = django_user_model.objects.create_user("auditor")
    base = saving.sha256_hex(original.encode())
    changed = original.replace("4", "8")
    saving.save_config(
        "audited", changed, server=on_repository(tmp_path), base_sha256=base,
        author_id=author.pk, source="text",
    )  # fmt: skip
    event = AuditEvent.objects.get(action="config.save", outcome="ok")
    assert event.username == "auditor" and event.model_name == "audited"
    assert event.before_sha256 == base
    assert event.after_sha256 == saving.sha256_hex(changed.encode())
    with pytest.raises(saving.SaveConflict):
        saving.save_config(
            "audited", original, server=on_repository(tmp_path), base_sha256=base,
            author_id=author.pk, source="text",
        )  # fmt: skip
    refused = AuditEvent.objects.get(action="config.save", outcome="failed")
    assert "changed since it was opened" in refused.detail
