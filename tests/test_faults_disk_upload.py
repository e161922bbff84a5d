"""Fault case "disk full during upload", on a real size-limited tmpfs that holds both the
model repository and the staging folder: a chunk that hits ENOSPC (through the REST view
and through the raw ASGI route), and ENOSPC while a completed upload is prepared for
publishing. Version 1 of the existing model must never change, nothing half-written may
reach the repository, and every failure must say what to do and allow a retry."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from common import preallocate
from registry import servers
from repository_app.models import Upload
from repository_app.uploads import chunk_asgi, sharing, staging
from team.roles import OPERATOR

from .test_upload_protocol import api_client, create, send, tree

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

KiB = 1024
DISK_BYTES = 1024 * KiB
PAGE = 4 * KiB
MODEL = "plan"
CONFIG = f'name: "{MODEL}"\nbackend: "tensorrt"\n'


# --- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture()
def disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB tmpfs, unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)], check=True
    )
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture()
def repo(disk: Path, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A TensorRT model `plan` with version 1 (never parsed), staging on the same tmpfs;
    Triton is not consulted (no model is loading)."""
    root = disk / "model_repository"
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    (root / MODEL / "1" / "model.plan").write_bytes(b"plan-v1")
    settings.MODEL_REPOSITORY = root
    settings.UPLOAD_STAGING_DIR = disk / ".staging"
    monkeypatch.setattr(sharing, "_triton_states", lambda server, model: [])
    assert os.stat(staging.staging_root(servers.default())).st_dev == os.stat(root).st_dev
    return root


@pytest.fixture()
def operator() -> Client:
    return api_client("olga-operator", OPERATOR)


def version_one(repo: Path) -> dict[str, bytes]:
    """The existing model's files as bytes (config.pbtxt and version 1)."""
    folder = repo / MODEL
    files = [folder / "config.pbtxt", *sorted((folder / "1").rglob("*"))]
    return {str(p.relative_to(folder)): p.read_bytes() for p in files if p.is_file()}


V1 = {"config.pbtxt": CONFIG.encode(), "1/model.plan": b"plan-v1"}


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill the tmpfs to the last page (unbuffered), then free ``leave`` bytes again."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * PAGE)
    except OSError as exc:
        assert exc.errno == 28, exc
    finally:
        os.close(fd)
    assert shutil.disk_usage(disk).free < PAGE
    if leave:
        os.truncate(filler, filler.stat().st_size - leave)
        assert shutil.disk_usage(disk).free == leave
    return filler


def staged(upload_id: str) -> set[str]:
    return {p.name for p in staging.upload_dir(Upload.objects.get(pk=upload_id)).iterdir()}


def complete(client: Client, upload_id: str):  # type: ignore[no-untyped-def]
    return client.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")


def offset_of(client: Client, upload_id: str) -> int:
    response = client.get(f"/api/v1/uploads/{upload_id}/")
    assert response.status_code == 200, response.content
    return int(response.json()["offset"])


# Both ways a chunk arrives: (status, JSON body, headers with lower-case names).
Chunk = Callable[[Client, str, bytes, int], tuple[int, dict[str, Any], dict[str, str]]]


def through_rest_view(
    client: Client, upload_id: str, data: bytes, offset: int
) -> tuple[int, dict[str, Any], dict[str, str]]:
    response = send(client, upload_id, data, offset)
    return response.status_code, response.json(), {k.lower(): v for k, v in response.items()}


def through_asgi_route(
    client: Client, upload_id: str, data: bytes, offset: int, declared: int | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The raw ASGI PATCH route (chunk_asgi.chunk_app), called in process; ``declared`` is
    a Content-Length other than the data's (a client that stops part way)."""
    token = client.defaults["HTTP_AUTHORIZATION"]
    assert Token.objects.filter(key=token.split()[1]).exists()
    path = f"/api/v1/uploads/{upload_id}/"
    scope = {
        "type": "http", "method": "PATCH", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "scheme": "http", "http_version": "1.1",
        "server": ("testserver", 80), "client": ("127.0.0.1", 40000),
        "headers": [
            (b"host", b"testserver"), (b"authorization", token.encode()),
            (b"upload-offset", str(offset).encode()),
            (b"content-type", b"application/octet-stream"),
            (b"content-length", str(len(data) if declared is None else declared).encode()),
        ],
    }  # fmt: skip
    assert chunk_asgi.is_chunk_request(scope)
    halves = [data[: len(data) // 2], data[len(data) // 2 :]]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        body = halves.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(halves)}

    async def collect(message: Any) -> None:
        sent.append(dict(message))

    asyncio.run(chunk_asgi.chunk_app(scope, receive, collect))
    start, body = sent
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], json.loads(body["body"]), headers


def zipped(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return buffer.getvalue()


def upload_all(client: Client, data: bytes, **fields: Any) -> str:
    created = create(client, model=MODEL, size=len(data), **fields)
    assert created.status_code == 201, created.content
    upload_id = created.json()["id"]
    response = send(client, upload_id, data, 0)
    assert response.status_code == 200, response.content
    return upload_id


# --- a chunk that hits ENOSPC --------------------------------------------------------------


@pytest.mark.parametrize("chunk", [through_rest_view, through_asgi_route], ids=["rest", "asgi"])
def test_a_chunk_that_fills_the_disk_answers_507_keeps_the_offset_and_resumes(
    repo: Path, disk: Path, operator: Client, chunk: Chunk, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file system that cannot reserve an upload's blocks (fallocate unsupported, as on
    # some network file systems), so the disk can fill under it.
    monkeypatch.setattr(preallocate, "_FALLOCATE", None)
    data = os.urandom(256 * KiB)
    part = 64 * KiB
    digest = hashlib.sha256(data).hexdigest()
    created = create(operator, model=MODEL, filename="model.plan", size=len(data), sha256=digest)
    assert created.status_code == 201, created.content  # the declared size fits now
    upload_id = created.json()["id"]
    status, body, _ = chunk(operator, upload_id, data[:part], 0)
    assert (status, body["offset"]) == (200, part), body

    # Another writer takes the disk; 8 KiB are left, so the next chunk starts to be written.
    filler = fill(disk, leave=2 * PAGE)
    for _ in range(2):  # a second try while still full gets the same answer
        status, body, headers = chunk(operator, upload_id, data[part : 2 * part], part)
        assert status == 507, body
        assert "disk is full" in body["message"], body
        assert f"resume from offset {part}" in body["message"], body
        assert body["expected_offset"] == part
        assert headers["upload-offset"] == str(part)
        # The partial chunk was cut off again: its pages are free, the offset did not move.
        assert shutil.disk_usage(disk).free == 2 * PAGE
        assert offset_of(operator, upload_id) == part
        assert staging.data_path(Upload.objects.get(pk=upload_id)).read_bytes() == data[:part]
        assert version_one(repo) == V1

    filler.unlink()
    resume = offset_of(operator, upload_id)
    for offset in range(resume, len(data), part):
        status, body, _ = chunk(operator, upload_id, data[offset : offset + part], offset)
        assert status == 200, body
    done = complete(operator, upload_id)
    assert done.status_code == 201, done.content
    assert done.json()["sha256"] == digest and done.json()["version"] == 2
    assert (repo / MODEL / "2" / "model.plan").read_bytes() == data
    assert version_one(repo) == V1


def test_an_upload_reserves_its_declared_size_so_another_writer_cannot_starve_it(
    repo: Path, disk: Path, operator: Client
) -> None:
    data = os.urandom(256 * KiB)
    part = 64 * KiB
    free = shutil.disk_usage(disk).free
    created = create(operator, model=MODEL, filename="model.plan", size=len(data))
    assert created.status_code == 201, created.content
    upload_id = created.json()["id"]
    path = staging.data_path(Upload.objects.get(pk=upload_id))
    # The blocks are taken at creation; the size still says how many bytes arrived.
    assert free - shutil.disk_usage(disk).free >= len(data)
    assert path.stat().st_size == 0 and offset_of(operator, upload_id) == 0

    # A chunk that ends short is cut off again, which frees the blocks past it: they are
    # reserved again at once.
    status, body, _ = through_asgi_route(operator, upload_id, data[:part], 0, declared=2 * part)
    assert status == 400 and "ended after" in body["message"], body
    assert path.stat().st_size == 0

    filler = fill(disk)  # another writer takes everything else
    for offset in range(0, len(data), part):
        status, body, _ = through_asgi_route(
            operator, upload_id, data[offset : offset + part], offset
        )
        assert status == 200, body
    assert path.read_bytes() == data
    filler.unlink()
    done = complete(operator, upload_id)
    assert done.status_code == 201, done.content
    assert (repo / MODEL / "2" / "model.plan").read_bytes() == data


def test_an_upload_whose_size_cannot_be_reserved_is_refused_and_leaves_nothing(
    repo: Path, disk: Path, operator: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    filler = fill(disk, leave=2 * PAGE)
    # The free-space check passed, then another writer took the space before the
    # reservation: the check's answer is stale.
    stale = SimpleNamespace(total=DISK_BYTES, used=0, free=DISK_BYTES)
    with monkeypatch.context() as patched:
        patched.setattr(shutil, "disk_usage", lambda _path: stale)
        created = create(operator, model=MODEL, filename="model.plan", size=256 * KiB)
    assert created.status_code == 507, created.content
    body = created.json()
    assert body["field"] == "size" and "not enough disk space for 262144 bytes" in body["message"]
    assert not Upload.objects.exists()
    assert not any(staging.staging_root(servers.default()).iterdir())
    assert shutil.disk_usage(disk).free == 2 * PAGE
    filler.unlink()


# --- ENOSPC while a completed upload is prepared ---------------------------------------------


def many_small_files() -> bytes:
    """model.plan plus 64 files of 1 KiB: 65 KiB declared, but 65 pages (260 KiB) on tmpfs."""
    entries = [("model.plan", b"plan-v2" * 100)]
    entries += [(f"calibration/{i:02d}.bin", bytes([i]) * KiB) for i in range(64)]
    return zipped(entries)


def test_a_disk_that_fills_during_extraction_publishes_nothing_and_the_upload_can_be_retried(
    repo: Path, disk: Path, operator: Client
) -> None:
    archive = many_small_files()
    upload_id = upload_all(operator, archive, filename="version.zip")
    before = tree(repo)
    # 128 KiB free: more than the declared 65 KiB (the size check passes), less than the
    # extracted files need, so extraction runs into ENOSPC part way.
    filler = fill(disk, leave=32 * PAGE)
    done = complete(operator, upload_id)
    assert done.status_code == 507, done.content
    message = done.json()["message"]
    assert "disk is full" in message and "nothing was published" in message, message
    assert "complete the upload again" in message
    assert tree(repo) == before and not (repo / MODEL / "2").exists()
    assert version_one(repo) == V1
    # The half-extracted folder is gone; the received bytes are kept for a retry.
    assert staged(upload_id) == {"data"}
    assert shutil.disk_usage(disk).free == 32 * PAGE
    row = Upload.objects.get(pk=upload_id)
    assert row.state == Upload.State.RECEIVING and row.version is None
    assert offset_of(operator, upload_id) == len(archive)

    filler.unlink()
    again = complete(operator, upload_id)
    assert again.status_code == 201, again.content
    assert again.json()["version"] == 2
    published = repo / MODEL / "2"
    assert (published / "model.plan").read_bytes() == b"plan-v2" * 100
    assert len(list((published / "calibration").iterdir())) == 64
    assert (published / "calibration" / "63.bin").read_bytes() == bytes([63]) * KiB
    assert version_one(repo) == V1


def test_an_archive_too_big_for_the_free_space_is_kept_and_can_be_aborted_cleanly(
    repo: Path, disk: Path, operator: Client
) -> None:
    archive = zipped([("model.plan", b"\0" * (192 * KiB))])  # compresses to a few bytes
    upload_id = upload_all(operator, archive, filename="version.zip")
    before = tree(repo)
    filler = fill(disk, leave=32 * PAGE)  # 128 KiB free, the archive unpacks to 192 KiB
    done = complete(operator, upload_id)
    assert done.status_code == 507, done.content
    message = done.json()["message"]
    assert "not enough disk space" in message and "nothing was published" in message
    assert tree(repo) == before and version_one(repo) == V1
    assert staged(upload_id) == {"data"}
    assert Upload.objects.get(pk=upload_id).state == Upload.State.RECEIVING
    assert offset_of(operator, upload_id) == len(archive)

    assert operator.delete(f"/api/v1/uploads/{upload_id}/").status_code == 204
    assert not staging.upload_dir(Upload.objects.get(pk=upload_id)).exists()
    assert Upload.objects.get(pk=upload_id).state == Upload.State.ABORTED
    filler.unlink()
    # Nothing of the upload is left anywhere on the disk: only the repository remains.
    assert {p.name for p in disk.iterdir()} == {"model_repository", ".staging"}
    assert tree(repo) == before and version_one(repo) == V1


def test_a_new_model_whose_config_cannot_be_written_publishes_nothing_and_can_be_retried(
    repo: Path, disk: Path, operator: Client
) -> None:
    data = os.urandom(16 * KiB)
    created = create(
        operator, model="fresh", new_model=True, backend="tensorrt", filename="model.plan",
        size=len(data),
    )  # fmt: skip
    assert created.status_code == 201, created.content
    upload_id = created.json()["id"]
    assert send(operator, upload_id, data, 0).status_code == 200
    before = tree(repo)
    filler = fill(disk)  # the skeleton config.pbtxt needs a page that is not there
    done = complete(operator, upload_id)
    assert done.status_code == 507, done.content
    assert "disk is full" in done.json()["message"]
    assert tree(repo) == before and not (repo / "fresh").exists()
    assert version_one(repo) == V1
    assert staged(upload_id) == {"data"}
    assert Upload.objects.get(pk=upload_id).state == Upload.State.RECEIVING

    filler.unlink()
    again = complete(operator, upload_id)
    assert again.status_code == 201, again.content
    assert (repo / "fresh" / "1" / "model.plan").read_bytes() == data
    assert (repo / "fresh" / "config.pbtxt").is_file()
    assert version_one(repo) == V1
