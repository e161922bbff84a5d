"""Archives are scanned completely before anything is extracted; a bad one is refused whole."""

# The fixtures come from test_upload_protocol; test arguments of the same name use them.
# ruff: noqa: F811

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from team.models import AuditEvent

from .test_upload_protocol import (  # noqa: F401
    MODEL_PY,
    admin,
    create,
    operator,
    repo,
    staging_entries,
    tiny_onnx,
    tree,
    upload,
)

pytestmark = pytest.mark.django_db


def make_zip(entries: list[tuple[str, bytes]], symlink: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = 0o120777 << 16  # a symlink's mode bits
            archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def make_tar(members: list[tarfile.TarInfo | tuple[str, bytes]], gz: bool = False) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gz else "w") as archive:
        for member in members:
            if isinstance(member, tuple):
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                archive.addfile(info, io.BytesIO(member[1]))
            else:
                archive.addfile(member)
    return buffer.getvalue()


def special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


ONNX = tiny_onnx()
BAD_ARCHIVES = {
    "zip slip": ("model.zip", make_zip([("model.onnx", ONNX), ("../../escaped.txt", b"x")]),
                 "leads out of the folder"),
    "absolute path": ("model.tar", make_tar([("model.onnx", ONNX), ("/tmp/abs.txt", b"x")]),
                      "is an absolute path"),
    "symlink in a tar": ("model.tar.gz",
                         make_tar([("model.onnx", ONNX), special("link", tarfile.SYMTYPE, "/etc")], gz=True),
                         "is a symbolic link"),
    "symlink in a zip": ("model.zip", make_zip([("model.onnx", ONNX)], symlink="evil"),
                         "is a symbolic link"),
    "hard link": ("model.tar", make_tar([("model.onnx", ONNX),
                                         special("hard", tarfile.LNKTYPE, "/etc/shadow")]),
                  "is a hard link"),
    "device file": ("model.tar", make_tar([("model.onnx", ONNX), special("dev", tarfile.CHRTYPE)]),
                    "is a device file"),
    "fifo": ("model.tar", make_tar([("model.onnx", ONNX), special("pipe", tarfile.FIFOTYPE)]),
             "is a device file or FIFO"),
    "double extension inside": ("model.zip", make_zip([("model.onnx", ONNX), ("readme.txt.sh", b"x")]),
                                "double extension"),
    "missing model file": ("model.zip", make_zip([("weights.bin", b"x")]),
                           "needs model.onnx"),
    "not an archive": ("model.zip", b"PK\x03\x04 this is not really a zip", "not a readable .zip"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_ARCHIVES))
def test_a_dangerous_archive_is_refused_whole_and_nothing_is_extracted(repo, admin, case):
    filename, data, expected = BAD_ARCHIVES[case]
    before = tree(repo)
    _, done = upload(admin, data, model="plain", filename=filename)
    assert done.status_code == 422, done.content
    assert expected in done.json()["message"]
    assert "nothing was extracted" in done.json()["message"]
    assert tree(repo) == before
    assert staging_entries() == set()
    assert not list(repo.parent.glob("escaped*")) and not Path("/tmp/abs.txt").exists()
    assert AuditEvent.objects.filter(action="upload", outcome="failed").exists()


def test_a_zip_bomb_with_too_many_members_is_refused_before_extracting(repo, operator, settings):
    settings.UPLOAD_MAX_ARCHIVE_MEMBERS = 10
    data = make_zip([("model.onnx", ONNX)] + [(f"f{i}.txt", b"") for i in range(10)])
    _, done = upload(operator, data, model="plain", filename="model.zip")
    assert done.status_code == 422
    assert "11 members, more than 10" in done.json()["message"]
    many_tar = make_tar([("model.onnx", ONNX)] + [(f"f{i}.txt", b"") for i in range(10)])
    _, done = upload(operator, many_tar, model="plain", filename="model.tar")
    assert done.status_code == 422 and "more than 10 members" in done.json()["message"]
    assert not (repo / "plain" / "2").exists()


def test_a_zip_bomb_with_a_huge_uncompressed_size_is_refused_before_extracting(
    repo, operator, settings
):
    settings.UPLOAD_MAX_TOTAL_BYTES = 1024 * 1024
    data = make_zip([("model.onnx", ONNX), ("zeros.bin", b"\x00" * (4 * 1024 * 1024))])
    assert len(data) < 64 * 1024  # small on the wire
    _, done = upload(operator, data, model="plain", filename="model.zip", chunk=16 * 1024)
    assert done.status_code == 422
    assert "unpacks to more than 1048576 bytes" in done.json()["message"]
    assert not (repo / "plain" / "2").exists() and staging_entries() == set()


def test_an_archive_that_unpacks_to_far_more_than_itself_is_refused(repo, operator, settings):
    """Past the free allowance, at most UPLOAD_MAX_ARCHIVE_RATIO:1 (a 204 KB zip of 200 MiB
    is a bomb under every total limit a real model needs)."""
    settings.UPLOAD_ARCHIVE_RATIO_FREE_BYTES = 1024 * 1024
    data = make_zip([("model.onnx", ONNX), ("zeros.bin", b"\x00" * (4 * 1024 * 1024))])
    assert len(data) * 200 < 4 * 1024 * 1024  # far over 200:1
    _, done = upload(operator, data, model="plain", filename="model.zip", chunk=16 * 1024)
    assert done.status_code == 422, done.content
    assert "over 200:1 past 1,048,576 bytes (UPLOAD_MAX_ARCHIVE_RATIO)" in done.json()["message"]
    assert not (repo / "plain" / "2").exists() and staging_entries() == set()
    settings.UPLOAD_MAX_ARCHIVE_RATIO = 100_000  # the same archive, a looser bound: stored
    _, done = upload(operator, data, model="plain", filename="model.zip", chunk=16 * 1024)
    assert done.status_code == 201, done.content


def test_an_oversized_member_is_refused(repo, operator, settings):
    settings.UPLOAD_MAX_FILE_BYTES = 1000
    data = make_tar([("model.onnx", ONNX), ("big.bin", b"\x01" * 1001)], gz=True)
    _, done = upload(operator, data, model="plain", filename="model.tgz")
    assert done.status_code == 422
    assert "'big.bin' is 1001 bytes uncompressed, over the per-file limit" in done.json()["message"]


def test_an_archive_holding_code_needs_an_admin(repo, operator, admin):
    data = make_zip([("model.onnx", ONNX), ("postprocess.py", b"print('hi')\n")])
    before = tree(repo)
    _, done = upload(operator, data, model="plain", filename="model.zip")
    assert done.status_code == 403 and "only admins" in done.json()["message"].lower()
    assert tree(repo) == before
    _, done = upload(admin, data, model="plain", filename="model.zip")
    assert done.status_code == 201
    assert tree(repo / "plain" / "2") == {"model.onnx", "postprocess.py"}


def test_a_python_model_with_extra_modules_lands_in_the_next_version(repo, admin):
    data = make_tar(
        [("pkg/model.py", MODEL_PY), ("pkg/helpers/util.py", b"X = 1\n")],
        gz=True,
    )
    _, done = upload(admin, data, model="pyadd", filename="pyadd-v2.tar.gz")
    assert done.status_code == 201, done.content
    # The one wrapping folder is dropped: model.py sits at the top of the version.
    assert tree(repo / "pyadd" / "2") == {"model.py", "helpers", "helpers/util.py"}
    mode = (repo / "pyadd" / "2" / "model.py").stat().st_mode & 0o777
    assert mode == 0o644


def test_a_savedmodel_archive_of_the_folder_content_is_wrapped_into_model_savedmodel(
    repo, operator, admin
):
    data = make_zip(
        [("saved_model.pb", b"graph"), ("variables/variables.data-00000-of-00001", b"w"),
         ("variables/variables.index", b"i")]
    )  # fmt: skip
    # TensorFlow graphs count as code (ops that write files): an Operator may not.
    refused = create(operator, model="tf", new_model=True, backend="tensorflow_savedmodel",
                     filename="resnet.zip", size=len(data))  # fmt: skip
    assert refused.status_code == 403 and "only admins" in refused.json()["message"].lower()
    _, done = upload(admin, data, model="tf", new_model=True,
                     backend="tensorflow_savedmodel", filename="resnet.zip")  # fmt: skip
    assert done.status_code == 201, done.content
    assert "model.savedmodel/saved_model.pb" in tree(repo / "tf" / "1")
    assert 'platform: "tensorflow_savedmodel"' in (repo / "tf" / "config.pbtxt").read_text()
