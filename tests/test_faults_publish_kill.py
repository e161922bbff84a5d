"""The web process SIGKILLed while it prepares a version in staging (extracting an archive):
the repository never shows a partial version, and the startup reconciler removes what
was left and records it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from devstack import services as svc
from repository_app.models import Upload
from team.models import AuditEvent

from .conftest import ROOT, start_web
from .test_upload_asgi import Api

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MODEL_PY = (
    b"import triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:\n    pass\n"
)


def archive(members: int, size: int) -> bytes:
    """model.py plus `members` data files (stored, not compressed: extraction writes them)."""
    buffer = io.BytesIO()
    block = os.urandom(size)
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("model.py", MODEL_PY)
        for i in range(members):
            zf.writestr(f"weights/part-{i:04d}.bin", block[:8] + i.to_bytes(4, "big") + block[12:])
    return buffer.getvalue()


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_web_process_killed_mid_publish_leaves_no_partial_version(
    service_env, tmp_path, settings
):
    repo = tmp_path / "repo"
    (repo / "killme" / "1").mkdir(parents=True)
    (repo / "killme" / "config.pbtxt").write_text('name: "killme"\nbackend: "python"\n')
    (repo / "killme" / "1" / "model.py").write_bytes(MODEL_PY)
    staging_dir = tmp_path / ".staging"
    env = {**service_env, "MODEL_REPOSITORY": str(repo), "UPLOAD_STAGING_DIR": str(staging_dir)}
    settings.MODEL_REPOSITORY, settings.UPLOAD_STAGING_DIR = repo, staging_dir
    before = tree(repo)
    admin = get_user_model().objects.create_superuser("kim-admin", "", "kim-password-1")
    token = Token.objects.create(user=admin).key
    data = archive(members=400, size=512 * 1024)  # 200 MB to extract

    web, base = start_web(env, tmp_path / "web.log")
    try:
        api = Api(base, Authorization=f"Token {token}")
        status, _, body = api.call(
            "POST", "/api/v1/uploads/",
            json.dumps({"model": "killme", "filename": "weights.zip", "size": len(data)}).encode(),
            **{"Content-Type": "application/json"},
        )  # fmt: skip
        assert status == 201, body
        upload_id = json.loads(body)["id"]
        chunk = 8 * 1024 * 1024
        for offset in range(0, len(data), chunk):
            status, _, body = api.patch(upload_id, data[offset : offset + chunk], offset)
            assert status == 200, body

        # Complete in the background; kill the server once extraction into staging started.
        threading.Thread(
            target=lambda: _ignore_errors(api.call, "POST", f"/api/v1/uploads/{upload_id}/complete?wait=1"),
            daemon=True,
        ).start()  # fmt: skip
        weights = staging_dir / upload_id / "version" / "weights"
        deadline = time.monotonic() + 60
        while not (weights.is_dir() and any(weights.iterdir())):
            assert time.monotonic() < deadline, "extraction never started"
            time.sleep(0.005)
        os.killpg(web.pid, signal.SIGKILL)
        web.wait(10)
    finally:
        if web.poll() is None:
            svc.stop(web)

    extracted = len(list(weights.iterdir()))
    assert 0 < extracted < 400, f"killed after {extracted} of 400 files"  # really mid-way
    assert tree(repo) == before  # no version 2, nothing half-written
    assert Upload.objects.get(pk=upload_id).state == Upload.State.PROCESSING

    # The next start: the reconciler runs before the web process (make run, compose).
    result = subprocess.run(
        [sys.executable, "manage.py", "reconcile_uploads", "--startup"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "interrupted while publishing" in result.stdout + result.stderr
    assert not (staging_dir / upload_id).exists()
    row = Upload.objects.get(pk=upload_id)
    assert row.state == Upload.State.FAILED and "nothing was published" in row.message
    event = AuditEvent.objects.filter(action="upload", username="system").first()
    assert event is not None and "stale staging removed" in event.detail
    assert tree(repo) == before
    shutil.rmtree(staging_dir, ignore_errors=True)


def _ignore_errors(fn, *args):  # type: ignore[no-untyped-def]
    # The server is killed under the request: its connection error is expected.
    with contextlib.suppress(OSError):
        fn(*args)
