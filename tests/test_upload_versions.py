"""Deleting versions (refused while Triton has them loaded unless "unload and delete"), the
version-policy shortcut, and the upload pages."""

# The fixtures come from test_upload_protocol; test arguments of the same name use them.
# ruff: noqa: F811

from __future__ import annotations

import shutil

import pytest
from django.contrib.auth import get_user_model
from django.templatetags.static import static
from django.test import Client

from repository_app.models import ConfigRevision
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, set_role
from triton_api.client import TritonClient

from .test_upload_protocol import DEMO, admin, api_client, operator, repo  # noqa: F401


@pytest.fixture()
def victim(triton):  # type: ignore[no-untyped-def]
    """A copy of add_sub with versions 1 and 2 in the real Triton's repository, v2 loaded."""
    folder = triton.repository / "upload_victim"
    shutil.copytree(DEMO / "add_sub", folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(folder / "1", folder / "2")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace('"add_sub"', '"upload_victim"'))
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("upload_victim")
    yield folder
    client.unload("upload_victim")
    shutil.rmtree(folder, ignore_errors=True)


def _states(triton) -> dict[str, str]:  # type: ignore[no-untyped-def]
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    return {s.version: s.state for s in client.model_states("upload_victim")}


@pytest.mark.integration
@pytest.mark.django_db
def test_deleting_a_loaded_version_is_refused_unless_unload_and_delete(triton, victim):
    admin = api_client("ada-admin", ADMIN)
    assert _states(triton).get("2") == "READY"
    refused = admin.delete("/api/v1/models/upload_victim/versions/2")
    assert refused.status_code == 409, refused.content
    assert "is loaded in Triton" in refused.json()["message"]
    assert (victim / "2" / "model.py").exists()

    # Version 1 is not served (the policy is latest 1): it goes without unloading.
    done = admin.delete("/api/v1/models/upload_victim/versions/1")
    assert done.status_code == 200 and not (victim / "1").exists()
    assert _states(triton).get("2") == "READY"

    # Another process (a web worker, the CLI) acts on the model: the unload waits its turn.
    from repository_app import control
    from repository_app import events as live

    key = control._claim_key("default", "upload_victim")
    live.shared_redis().set(key, "another-process")
    try:
        busy = admin.delete("/api/v1/models/upload_victim/versions/2?unload=1")
    finally:
        live.shared_redis().delete(key)
    assert busy.status_code == 409 and "already running" in busy.json()["message"]
    assert (victim / "2" / "model.py").exists() and _states(triton).get("2") == "READY"

    done = admin.delete("/api/v1/models/upload_victim/versions/2?unload=1")
    assert done.status_code == 200, done.content
    assert done.json()["unloaded"] is True and "stays unloaded" in done.json()["message"]
    assert not (victim / "2").exists()
    assert _states(triton).get("2") != "READY"
    events = AuditEvent.objects.filter(action="version.delete", model_name="upload_victim")
    assert sorted(e.outcome for e in events) == ["failed", "failed", "ok", "ok"]
    staging = triton.repository.parent / ".staging"
    assert not list(staging.glob(".trash-*"))


@pytest.mark.integration
@pytest.mark.django_db
def test_an_operator_may_not_delete_versions(triton, victim):
    operator = api_client("olga-operator", OPERATOR)
    response = operator.delete("/api/v1/models/upload_victim/versions/1")
    assert response.status_code == 403 and (victim / "1").is_dir()
    assert AuditEvent.objects.filter(action="version.delete", outcome="denied").exists()


@pytest.mark.django_db
def test_the_version_policy_shortcut_saves_through_the_config_editor(repo, operator):
    response = operator.put("/api/v1/models/plain/version-policy",
                            {"policy": "latest", "num_versions": 2}, content_type="application/json")  # fmt: skip
    assert response.status_code == 200, response.content
    text = (repo / "plain" / "config.pbtxt").read_text()
    assert "latest" in text and "num_versions: 2" in text
    revision = ConfigRevision.objects.filter(model="plain").first()
    assert revision.message == "version policy: latest 2"
    specific = operator.put("/api/v1/models/plain/version-policy",
                            {"policy": "specific", "versions": [1, 3]}, content_type="application/json")  # fmt: skip
    assert specific.status_code == 200
    assert "versions: [ 1, 3 ]" in (repo / "plain" / "config.pbtxt").read_text()
    bad = operator.put("/api/v1/models/plain/version-policy",
                       {"policy": "latest", "num_versions": 0}, content_type="application/json")  # fmt: skip
    assert bad.status_code == 400 and "at least 1" in bad.json()["message"]
    stale = operator.put("/api/v1/models/plain/version-policy",
                         {"policy": "all", "base_sha256": "0" * 64}, content_type="application/json")  # fmt: skip
    assert stale.status_code == 412


@pytest.mark.django_db
def test_the_pages_offer_uploads_and_deletions_by_role(repo):
    user = get_user_model().objects.create_user("pat", password="pat-password-1")
    set_role(user, OPERATOR)
    client = Client()
    client.force_login(user)
    listing = client.get("/models/").content.decode()
    assert 'id="new-model-link"' in listing
    page = client.get("/uploads/new-model/").content.decode()
    assert 'id="upload-form"' in page and static("js/upload.js") in page
    assert '<option value="python" disabled>' in page  # code needs an admin
    version_page = client.get("/models/plain/upload/").content.decode()
    assert 'next free number (<span id="next-version">2</span>)' in version_page
    assert "model.onnx" in version_page
    confirm = client.get("/models/plain/versions/1/delete").content.decode()
    assert "Your role cannot delete versions" in confirm
    response = client.post("/models/plain/versions/1/delete")
    assert response.status_code == 302 and (repo / "plain" / "1").is_dir()

    set_role(user, ADMIN)
    confirm = client.get("/models/plain/versions/1/delete").content.decode()
    assert 'id="delete-confirm"' in confirm
    response = client.post("/models/plain/versions/1/delete")
    assert response.status_code == 302 and not (repo / "plain" / "1").exists()
    assert client.get("/models/plain/versions/01/delete").status_code == 404
