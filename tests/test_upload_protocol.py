"""Uploads through the API: chunks at offsets, resume, checksums, limits, permissions,
atomic publishing with the reconciler, concurrent uploads, and config generation."""

from __future__ import annotations

import hashlib
import io
import shutil
import threading
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token

from registry import servers
from repository_app.models import PublishJob, Upload
from repository_app.uploads import chunks, publish, sharing, staging
from repository_app.uploads.reconcile import reconcile
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, VIEWER, set_role

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
MODEL_PY = (DEMO / "add_sub" / "1" / "model.py").read_bytes()


# --- fixtures and helpers (the other test_upload_* files import them) ---------------------


def tiny_onnx(batch: bool = True) -> bytes:
    """An ONNX Identity model: X [batch?, 3] FP32 -> Y."""
    from onnx import TensorProto, helper

    first: str | int = "batch" if batch else 2
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [first, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [first, 3])
    graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


ONNX_CONFIG = """name: "plain"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


@pytest.fixture()
def repo(tmp_path: Path, settings, monkeypatch) -> Path:
    """A private repository (an ONNX model `plain` v1, a Python model `pyadd` v1) with its
    staging folder next to it; Triton is not consulted (no model is loading)."""
    root = tmp_path / "model_repository"
    (root / "plain" / "1").mkdir(parents=True)
    (root / "plain" / "config.pbtxt").write_text(ONNX_CONFIG)
    (root / "plain" / "1" / "model.onnx").write_bytes(tiny_onnx())
    shutil.copytree(DEMO / "add_sub", root / "pyadd", ignore=shutil.ignore_patterns("__pycache__"))
    cfg = root / "pyadd" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"add_sub"', '"pyadd"'))
    settings.MODEL_REPOSITORY = root
    settings.UPLOAD_STAGING_DIR = tmp_path / ".staging"
    monkeypatch.setattr(sharing, "_triton_states", lambda server, model: [])
    return root


def api_client(name: str, role: str) -> Client:
    user = get_user_model().objects.create_user(name)
    set_role(user, role)
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


@pytest.fixture()
def operator() -> Client:
    return api_client("olga-operator", OPERATOR)


@pytest.fixture()
def admin() -> Client:
    return api_client("ada-admin", ADMIN)


def create(client: Client, **fields):  # type: ignore[no-untyped-def]
    return client.post("/api/v1/uploads/", fields, content_type="application/json")


def send(client: Client, upload_id: str, data: bytes, offset: int = 0):  # type: ignore[no-untyped-def]
    return client.patch(
        f"/api/v1/uploads/{upload_id}/",
        data,
        content_type="application/octet-stream",
        HTTP_UPLOAD_OFFSET=str(offset),
    )


def upload(client: Client, data: bytes, *, chunk: int = 1000, wait: bool = True, **fields):  # type: ignore[no-untyped-def]
    """Create, send in chunks, complete; returns (upload id, completion response)."""
    created = create(client, size=len(data), **fields)
    assert created.status_code == 201, created.content
    upload_id = created.json()["id"]
    for offset in range(0, len(data), chunk):
        response = send(client, upload_id, data[offset : offset + chunk], offset)
        assert response.status_code == 200, response.content
    return upload_id, client.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def staging_entries() -> set[str]:
    root = staging.staging_root(servers.default())
    return {p.name for p in root.iterdir() if p.name != ".locks"}


# --- tests ---------------------------------------------------------------------------------

pytestmark = pytest.mark.django_db


def test_a_new_onnx_model_gets_a_config_generated_from_its_graph(repo, operator):
    data = tiny_onnx(batch=True)
    _, done = upload(operator, data, model="tiny", new_model=True, backend="onnxruntime",
                     filename="model.onnx", sha256=hashlib.sha256(data).hexdigest())  # fmt: skip
    assert done.status_code == 201, done.content
    body = done.json()
    assert body["version"] == 1 and body["config_generated"] is True
    assert body["editor_url"] == "/models/tiny/config/"
    assert (repo / "tiny" / "1" / "model.onnx").read_bytes() == data
    from repository_app.modelconfig import parse_config

    config = parse_config((repo / "tiny" / "config.pbtxt").read_bytes()).config
    assert config.name == "tiny" and config.backend == "onnxruntime"
    assert config.max_batch_size > 0
    assert [list(t.dims) for t in config.input] == [[3]]  # batch dimension dropped
    assert [t.name for t in config.output] == ["Y"]
    assert staging_entries() == set()


def test_a_fixed_first_dimension_gives_max_batch_size_0_and_full_dims(repo, operator):
    _, done = upload(operator, tiny_onnx(batch=False), model="fixed", new_model=True,
                     backend="onnxruntime", filename="model.onnx")  # fmt: skip
    assert done.status_code == 201, done.content
    from repository_app.modelconfig import parse_config

    config = parse_config((repo / "fixed" / "config.pbtxt").read_bytes()).config
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [2, 3]


def test_a_new_model_without_graph_information_gets_a_skeleton_for_the_editor(repo, operator):
    _, done = upload(operator, b"\x00plan bytes", model="trt", new_model=True,
                     backend="tensorrt", filename="model.plan")  # fmt: skip
    assert done.status_code == 201, done.content
    assert "skeleton" in done.json()["message"]
    assert done.json()["editor_url"] == "/models/trt/config/"
    text = (repo / "trt" / "config.pbtxt").read_text()
    assert 'backend: "tensorrt"' in text and 'name: "trt"' in text


def test_an_onnx_file_that_does_not_parse_is_refused_and_nothing_is_written(repo, operator):
    before = tree(repo)
    _, done = upload(operator, b"not onnx at all", model="plain", filename="model.onnx")
    assert done.status_code == 422
    assert "does not parse as ONNX" in done.json()["message"]
    assert tree(repo) == before and staging_entries() == set()


def test_a_new_version_goes_to_the_next_free_number_and_is_recorded(repo, operator):
    data = tiny_onnx()
    upload_id, done = upload(operator, data, model="plain", filename="model.onnx")
    assert done.status_code == 201, done.content
    assert done.json()["version"] == 2
    assert done.json()["sha256"] == hashlib.sha256(data).hexdigest()
    assert (repo / "plain" / "2" / "model.onnx").read_bytes() == data
    row = Upload.objects.get(pk=upload_id)
    assert row.state == "published" and row.sha256 == hashlib.sha256(data).hexdigest()
    event = AuditEvent.objects.filter(action="upload", model_name="plain").first()
    assert event.outcome == "ok" and event.target == "version 2"
    assert event.after_sha256 == row.sha256 and f"{len(data)} bytes" in event.detail


def test_a_chosen_version_number_is_used_and_an_existing_one_is_refused(repo, operator):
    _, done = upload(operator, tiny_onnx(), model="plain", filename="model.onnx", version=7)
    assert done.json()["version"] == 7 and (repo / "plain" / "7").is_dir()
    refused = create(operator, model="plain", filename="model.onnx", size=10, version=7)
    assert refused.status_code == 409 and "already exists" in refused.json()["message"]


def test_an_interrupted_upload_resumes_from_the_stored_offset_to_a_matching_sha256(repo, operator):
    data = tiny_onnx()
    digest = hashlib.sha256(data).hexdigest()
    created = create(operator, model="plain", filename="model.onnx", size=len(data), sha256=digest)
    upload_id = created.json()["id"]
    assert send(operator, upload_id, data[:40], 0).json()["offset"] == 40

    class Dropped(io.RawIOBase):
        """A connection that dies after 10 bytes of a 40-byte chunk."""

        def __init__(self) -> None:
            self.sent = False

        def read(self, n: int = -1) -> bytes:
            if self.sent:
                raise ConnectionResetError("client went away")
            self.sent = True
            return data[40:50]

    row = Upload.objects.get(pk=upload_id)
    with pytest.raises(ConnectionResetError):
        chunks.append_chunk(row.user, row.pk, 40, Dropped(), 40)
    # Page reload: HEAD/GET says where to resume; the half chunk was cut off again.
    head = operator.head(f"/api/v1/uploads/{upload_id}/")
    assert head["Upload-Offset"] == "40"
    assert operator.get(f"/api/v1/uploads/{upload_id}/").json()["offset"] == 40
    for offset in range(40, len(data), 25):
        assert send(operator, upload_id, data[offset : offset + 25], offset).status_code == 200
    done = operator.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")
    assert done.status_code == 201, done.content
    assert done.json()["sha256"] == digest
    assert (repo / "plain" / "2" / "model.onnx").read_bytes() == data


def test_a_chunk_at_the_wrong_offset_gets_409_with_the_expected_offset(repo, operator):
    upload_id = create(operator, model="plain", filename="model.onnx", size=100).json()["id"]
    assert send(operator, upload_id, b"a" * 30, 0).status_code == 200
    for wrong in (0, 10, 31, 99):
        response = send(operator, upload_id, b"b" * 5, wrong)
        assert response.status_code == 409
        assert response.json()["expected_offset"] == 30
        assert response["Upload-Offset"] == "30"
        assert "expected offset 30" in response.json()["message"]
    assert staging.current_offset(Upload.objects.get(pk=upload_id)) == 30


def test_a_wrong_client_checksum_is_refused_and_nothing_is_published(repo, operator):
    before = tree(repo)
    _, done = upload(operator, tiny_onnx(), model="plain", filename="model.onnx", sha256="0" * 64)
    assert done.status_code == 422
    assert "sha256 mismatch" in done.json()["message"]
    assert tree(repo) == before and staging_entries() == set()
    assert AuditEvent.objects.filter(action="upload", outcome="failed").exists()


def test_completing_before_every_byte_arrived_names_the_offset(repo, operator):
    upload_id = create(operator, model="plain", filename="model.onnx", size=100).json()["id"]
    send(operator, upload_id, b"x" * 60, 0)
    response = operator.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")
    assert response.status_code == 409 and response.json()["expected_offset"] == 60


def test_size_limits_are_enforced_at_creation_and_on_every_chunk(repo, operator, settings):
    settings.UPLOAD_MAX_FILE_BYTES = 1000
    settings.UPLOAD_MAX_CHUNK_BYTES = 64 * 1024
    refused = create(operator, model="plain", filename="model.onnx", size=1001)
    assert refused.status_code == 413 and "UPLOAD_MAX_FILE_BYTES" in refused.json()["message"]
    assert staging_entries() == set() and not Upload.objects.exists()
    upload_id = create(operator, model="plain", filename="model.onnx", size=10).json()["id"]
    too_much = send(operator, upload_id, b"z" * 11, 0)
    assert too_much.status_code == 413 and "declared size" in too_much.json()["message"]
    assert staging.current_offset(Upload.objects.get(pk=upload_id)) == 0
    settings.UPLOAD_MAX_FILE_BYTES = 10**9
    big = create(operator, model="plain", filename="model.onnx", size=10**6).json()["id"]
    chunk = send(operator, big, b"z" * (64 * 1024 + 1), 0)
    assert chunk.status_code == 413 and "UPLOAD_MAX_CHUNK_BYTES" in chunk.json()["message"]


def test_an_operator_may_not_upload_python_code_but_an_admin_may(repo, operator, admin):
    refused = create(operator, model="pyadd", filename="model.py", size=len(MODEL_PY))
    assert refused.status_code == 403
    assert "only admins" in refused.json()["message"].lower()
    assert AuditEvent.objects.filter(action="upload", outcome="denied").exists()
    new_model = create(operator, model="newpy", new_model=True, backend="python",
                       filename="model.py", size=10)  # fmt: skip
    assert new_model.status_code == 403
    _, done = upload(admin, MODEL_PY, model="pyadd", filename="model.py")
    assert done.status_code == 201, done.content
    assert (repo / "pyadd" / "2" / "model.py").read_bytes() == MODEL_PY


def test_a_viewer_may_not_upload_at_all(repo):
    viewer = api_client("vera-viewer", VIEWER)
    response = create(viewer, model="plain", filename="model.onnx", size=10)
    assert response.status_code == 403


def test_someone_elses_upload_is_not_found(repo, operator):
    upload_id = create(operator, model="plain", filename="model.onnx", size=10).json()["id"]
    other = api_client("otto-operator", OPERATOR)
    assert other.get(f"/api/v1/uploads/{upload_id}/").status_code == 404
    assert send(other, upload_id, b"x", 0).status_code == 404


def test_an_aborted_upload_leaves_no_staging_data(repo, operator):
    upload_id = create(operator, model="plain", filename="model.onnx", size=100).json()["id"]
    send(operator, upload_id, b"x" * 50, 0)
    assert operator.delete(f"/api/v1/uploads/{upload_id}/").status_code == 204
    assert staging_entries() == set()
    assert Upload.objects.get(pk=upload_id).state == "aborted"


class Crash(BaseException):
    """The process dying between staging and publishing."""


def test_a_crash_between_staging_and_publish_leaves_no_version_and_the_reconciler_cleans_up(
    repo, operator, monkeypatch
):
    before = tree(repo)

    def crash(source, target):  # type: ignore[no-untyped-def]
        raise Crash()

    monkeypatch.setattr(publish, "rename_noreplace", crash)
    data = tiny_onnx()
    upload_id = create(operator, model="plain", filename="model.onnx", size=len(data)).json()["id"]
    send(operator, upload_id, data, 0)
    row = Upload.objects.get(pk=upload_id)
    with pytest.raises(Crash):
        publish.complete(row, row.user)
    assert tree(repo) == before  # no version folder
    assert Upload.objects.get(pk=upload_id).state == "processing"
    assert (
        staging.upload_dir(Upload.objects.get(pk=upload_id)) / "version" / "model.onnx"
    ).exists()

    removed = reconcile(startup=True)
    assert [r.reason for r in removed] == ["interrupted while publishing"]
    assert staging_entries() == set()
    row.refresh_from_db()
    assert row.state == "failed" and "nothing was published" in row.message
    event = AuditEvent.objects.filter(action="upload", username="system").first()
    assert "stale staging removed" in event.detail
    assert tree(repo) == before


def test_a_failed_rename_keeps_the_bytes_so_publishing_can_be_retried(repo, operator, monkeypatch):
    def disk_error(source, target):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")

    data = tiny_onnx()
    upload_id = create(operator, model="plain", filename="model.onnx", size=len(data)).json()["id"]
    send(operator, upload_id, data, 0)
    with monkeypatch.context() as patch:
        patch.setattr(publish, "rename_noreplace", disk_error)
        response = operator.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")
    assert response.status_code == 500 and "No space left" in response.json()["message"]
    assert not (repo / "plain" / "2").exists()
    assert Upload.objects.get(pk=upload_id).state == "receiving"
    again = operator.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")
    assert again.status_code == 201 and again.json()["version"] == 2


def test_the_reconciler_removes_orphans_and_expired_uploads_but_keeps_active_ones(
    repo, operator, settings
):
    active = create(operator, model="plain", filename="model.onnx", size=100).json()["id"]
    old = create(operator, model="plain", filename="model.onnx", size=100).json()["id"]
    send(operator, old, b"x" * 10, 0)
    Upload.objects.filter(pk=old).update(updated_at="2000-01-01T00:00:00Z")
    orphan = staging.staging_root(servers.default()) / "7b0c2a6e-2d7b-4d8e-9a43-0f2f3b8f1c11"
    orphan.mkdir()
    (orphan / "data").write_bytes(b"left behind")
    trash = staging.staging_root(servers.default()) / ".trash-0123"
    trash.mkdir()
    reasons = sorted(r.reason for r in reconcile())
    assert reasons == ["idle for too long", "left over from a version deletion", "no upload row"]
    assert staging_entries() == {active}
    assert Upload.objects.get(pk=old).state == "expired"


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_uploads_to_one_model_get_distinct_versions(repo, operator):
    data = tiny_onnx()
    ids = []
    for _ in range(2):
        upload_id = create(operator, model="plain", filename="model.onnx", size=len(data))
        ids.append(upload_id.json()["id"])
        send(operator, ids[-1], data, 0)
    results: list[object] = []

    def finish(upload_id: str) -> None:
        try:
            row = Upload.objects.get(pk=upload_id)
            results.append(publish.complete(row, row.user).version)
        except Exception as exc:  # reported below
            results.append(exc)
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=finish, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [2, 3]  # type: ignore[type-var]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_uploads_to_one_chosen_version_get_one_clear_conflict(repo, operator):
    data = tiny_onnx()
    ids = []
    for _ in range(2):
        created = create(operator, model="plain", filename="model.onnx", size=len(data), version=5)
        ids.append(created.json()["id"])
        send(operator, ids[-1], data, 0)
    outcomes: list[str] = []

    def finish(upload_id: str) -> None:
        try:
            row = Upload.objects.get(pk=upload_id)
            outcomes.append(f"version {publish.complete(row, row.user).version}")
        except staging.UploadError as exc:
            outcomes.append(f"{exc.status}: {exc.message}")
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=finish, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [
        "409: version 5 already exists: nothing was published",
        "version 5",
    ]


def test_publishing_waits_for_no_model_loading_in_triton(repo, operator, monkeypatch):
    from triton_api.client import ModelState

    monkeypatch.setattr(
        sharing, "_triton_states", lambda server, model: [ModelState(model, "1", "LOADING")]
    )
    upload_id, done = upload(operator, tiny_onnx(), model="plain", filename="model.onnx")
    assert done.status_code == 409 and "LOADING" in done.json()["message"]
    assert not (repo / "plain" / "2").exists()
    assert Upload.objects.get(pk=upload_id).state == "receiving"  # publish again later
    monkeypatch.setattr(sharing, "_triton_states", lambda server, model: [])
    again = operator.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")
    assert again.status_code == 201


@pytest.mark.django_db(transaction=True)
def test_completion_without_wait_publishes_in_the_background(repo, operator, publishes_here):
    data = tiny_onnx()
    created = create(operator, model="plain", filename="model.onnx", size=len(data))
    upload_id = created.json()["id"]
    send(operator, upload_id, data, 0)
    response = operator.post(f"/api/v1/uploads/{upload_id}/complete")
    assert response.status_code == 202 and response.json()["state"] == "processing"
    # A job of the one lifecycle, queued: run here as a worker would (this repository is
    # this process's own).
    job = PublishJob.objects.get(upload_id=upload_id)
    assert job.state == "queued"
    assert publishes_here() == ["succeeded"]
    state = operator.get(f"/api/v1/uploads/{upload_id}/").json()
    assert state["state"] == "published" and state["version"] == 2
    job.refresh_from_db()
    assert (job.worker, job.attempts) == ("this test", 1)


@pytest.mark.django_db(transaction=True)
def test_a_publish_whose_worker_died_is_interrupted_and_its_upload_settled(
    repo, operator, publishes_here
):
    """Any worker's watchdog ends it, wherever it ran: nothing reached the repository, so
    the upload fails and its staging folder goes."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs import lifecycle
    from profiler_app import watchdog

    data = tiny_onnx()
    created = create(operator, model="plain", filename="model.onnx", size=len(data))
    upload_id = created.json()["id"]
    send(operator, upload_id, data, 0)
    assert operator.post(f"/api/v1/uploads/{upload_id}/complete").status_code == 202
    job = PublishJob.objects.get(upload_id=upload_id)
    assert lifecycle.claim(lifecycle.KINDS["publish"], job.pk, {"worker": "w1@gpu-host-2"})
    stale = timezone.now() - timedelta(seconds=lifecycle.STALE_AFTER_S + 5)
    PublishJob.objects.filter(pk=job.pk).update(heartbeat_at=stale)
    assert operator.get(f"/api/v1/uploads/{upload_id}/").json()["state"] == "processing"
    watchdog.check()
    job.refresh_from_db()
    assert job.state == "interrupted" and "stopped sending heartbeats" in job.error
    upload = Upload.objects.get(pk=upload_id)
    assert upload.state == "failed" and "nothing was published" in upload.message
    assert not staging.upload_dir(upload).exists()
    assert not (repo / "plain" / "2").exists()


def asgi_chunk(client: Client, upload_id: str, body: bytes, offset: int) -> tuple[int, dict, int]:
    """One chunk through the ASGI chunk path (chunk_asgi.handle_chunk), as the web server
    hands it over: (status, JSON body, SQL queries it made)."""
    import asyncio
    from io import BytesIO

    from django.core.handlers.asgi import ASGIRequest
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from repository_app.uploads.chunk_asgi import BodyStream, handle_chunk

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    messages = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive():  # type: ignore[no-untyped-def]
        return next(messages)

    token = client.defaults["HTTP_AUTHORIZATION"].encode()
    scope = {
        "type": "http", "method": "PATCH", "path": f"/api/v1/uploads/{upload_id}/",
        "query_string": b"", "server": ("testserver", 80), "client": ("127.0.0.1", 1),
        "headers": [(b"host", b"testserver"), (b"authorization", token),
                    (b"upload-offset", str(offset).encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"content-type", b"application/octet-stream")],
    }  # fmt: skip
    try:
        with CaptureQueriesContext(connection) as queries:
            status, answer, _ = handle_chunk(
                ASGIRequest(scope, BytesIO()), upload_id, BodyStream(receive, loop)
            )
    finally:
        loop.call_soon_threadsafe(loop.stop)
    return status, answer, len(queries)


@pytest.mark.django_db(transaction=True)
def test_a_chunk_through_the_asgi_path_costs_three_queries(repo, operator, tmp_path):
    """One authentication; one read of the upload's row under its lock, which carries the
    user's permissions, groups and narrowings and the registry (team.role_facts,
    servers.all_column) for the ownership and role checks; one UPDATE. Before: 8 (11 before
    #30): the row twice, and one query each for the permissions, the groups, the narrowings
    and the registry. A process that never saw the upload reads its row once more, before
    the lock, to find where the lock is."""
    from registry.models import TritonServer
    from team.models import ServerRole

    user = get_user_model().objects.get(username="olga-operator")
    ServerRole.objects.create(user=user, kind="server", value="elsewhere", role="Viewer")
    TritonServer.objects.create(
        name="elsewhere", grpc_url="127.0.0.1:1", http_url="http://127.0.0.1:2",
        metrics_url="http://127.0.0.1:3/metrics", repository=str(tmp_path / "other"),
        labels={"env": "lab"},
    )  # fmt: skip
    data = b"\x01" * 7500
    created = create(operator, model="plain", filename="model.onnx", size=len(data), version=2)
    assert created.status_code == 201, created.content
    upload_id = created.json()["id"]

    assert asgi_chunk(operator, upload_id, data[:2500], 0)[::2] == (200, 3)
    status, answer, queries = asgi_chunk(operator, upload_id, data[2500:5000], 2500)
    assert (status, answer["offset"], queries) == (200, 5000, 3)
    staging._lock_paths.pop(upload_id)  # as in another web process
    status, answer, queries = asgi_chunk(operator, upload_id, data[5000:], 5000)
    assert (status, answer["offset"], queries) == (200, 7500, 4)
    assert staging.known_lock_path(upload_id) == staging.lock_path(Upload.objects.get(pk=upload_id))


def test_a_remembered_lock_path_that_went_stale_is_found_again_from_the_row(
    repo, operator, tmp_path, monkeypatch
):
    """The lock is taken where the row says now, whatever this process remembered: a
    remembered path is only a guess, checked under the lock it names."""
    created = create(operator, model="plain", filename="model.onnx", size=20, version=2)
    upload_id = created.json()["id"]
    right = staging.known_lock_path(upload_id)
    assert right is not None and right.parent.name == ".locks"
    stale = tmp_path / "stale" / "upload.lock"
    staging._lock_paths.put(upload_id, stale)
    locked: list[Path] = []

    def recording_flock(path: Path):  # type: ignore[no-untyped-def]
        locked.append(path)
        return real_flock(path)

    real_flock = chunks.flock
    monkeypatch.setattr(chunks, "flock", recording_flock)
    assert send(operator, upload_id, b"a" * 20, 0).status_code == 200
    assert locked == [stale, right]  # the chunk was written under the lock at `right`
    assert staging.known_lock_path(upload_id) == right
    assert Upload.objects.get(pk=upload_id).received == 20


@pytest.mark.django_db(transaction=True)
def test_a_chunk_for_an_id_that_is_no_uuid_is_404_not_a_crash(repo, operator):
    """The chunk route takes any 36 hex digits and dashes; Django's UUID field refuses
    most of them with an exception."""
    for bad in ("-" * 36, "0" * 36, "a" * 8 + "-" * 28):
        status, answer, _ = asgi_chunk(operator, bad, b"x", 0)
        assert (status, answer["message"]) == (404, "no such upload")


def test_the_chunk_read_compiled_once_carries_each_users_own_role_facts(repo, operator):
    """The chunk's read is compiled once and run again with each user's pk and upload id
    (chunks._row_with_facts): a second user gets their own narrowing, not the first's."""
    from team.models import ServerRole

    otto = api_client("otto-operator", OPERATOR)
    mine = create(operator, model="plain", filename="model.onnx", size=30, version=2)
    his = create(otto, model="plain", filename="model.onnx", size=30, version=3)
    assert (mine.status_code, his.status_code) == (201, 201)
    mine_id, his_id = mine.json()["id"], his.json()["id"]
    assert send(operator, mine_id, b"a" * 10, 0).status_code == 200  # compiled here
    assert send(otto, his_id, b"b" * 10, 0).status_code == 200
    ServerRole.objects.create(
        user=get_user_model().objects.get(username="otto-operator"),
        kind="server", value=servers.DEFAULT, role="Viewer",
    )  # fmt: skip
    refused = send(otto, his_id, b"b" * 10, 10)
    assert refused.status_code == 403 and "narrowed" in refused.json()["message"]
    assert send(otto, mine_id, b"b" * 10, 10).status_code == 404  # not his
    assert send(operator, mine_id, b"a" * 10, 10).status_code == 200
