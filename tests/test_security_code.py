"""An Operator must never make Triton run code: model names, code-loading config changes,
code hidden in archives, role checks on every upload step, and links out of the repository.

Each test is an attack a review reproduced; each fails when its fix is reverted.
"""

# The fixtures come from test_upload_protocol; test arguments of the same name use them.
# ruff: noqa: F811

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from django.test import Client

from devstack import run as devstack
from registry import servers
from repository_app import control, repository
from repository_app.editor import saving
from repository_app.modelconfig import validate_text
from repository_app.modelconfig.code_loading import code_changes
from repository_app.modelconfig.parsing import parse_config
from repository_app.models import ConfigRevision, ModelIntent, Upload
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, VIEWER, set_role

from .test_upload_archives import make_tar, make_zip
from .test_upload_protocol import (  # noqa: F401
    MODEL_PY,
    admin,
    api_client,
    create,
    operator,
    repo,
    send,
    tiny_onnx,
    tree,
    upload,
)

pytestmark = pytest.mark.django_db

OPENVINO_CONFIG = 'name: "ov"\nbackend: "openvino"\nmax_batch_size: 0\n'
ENV_PATH = (
    '  { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/../ov/1" } }'
)


def put_config(client: Client, name: str, text: str):  # type: ignore[no-untyped-def]
    sha = client.get(f"/api/v1/models/{name}/config").json()["sha256"]
    return client.put(
        f"/api/v1/models/{name}/config",
        {"text": text},
        content_type="application/json",
        HTTP_IF_MATCH=f'"{sha}"',
    )


def with_env_path(text: str) -> str:
    return text.rstrip() + "\nparameters [\n" + ENV_PATH + "\n]\n"


# --- model names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["inj$(id)", 'x"><img src=x>', "a;b", "two words", "模型"])
def test_a_new_model_with_shell_characters_in_its_name_is_refused(repo, operator, name):
    before = tree(repo)
    response = create(operator, model=name, new_model=True, backend="onnxruntime",
                      filename="model.onnx", size=10)  # fmt: skip
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "model"
    assert "invalid model name" in response.json()["message"]
    assert tree(repo) == before and not Upload.objects.exists()


def test_a_planted_folder_with_an_unsafe_name_is_flagged_and_never_loaded(repo, settings):
    planted = repo / "inj$(touch pwned)"
    (planted / "1").mkdir(parents=True)
    (planted / "config.pbtxt").write_text('backend: "python"\n')
    ModelIntent.objects.create(name=planted.name, loaded=True)
    ModelIntent.objects.create(name="plain", loaded=True)
    rows = {m.name: m for m in repository.scan(repo)}
    assert "only ASCII letters" in rows[planted.name].unsafe_name
    assert rows["plain"].unsafe_name == ""
    load, skipped = devstack.models_to_load(repo)
    assert planted.name not in load and "plain" in load
    assert [name for name, _ in skipped] == [planted.name]
    assert control.models_to_restore(servers.default(), {}) == ["plain"]
    with pytest.raises(control.ActionRefused, match="invalid model name"):
        control.start_action(servers.default(), "load", planted.name, "olga")
    page = Client()
    viewer = api_user("vera", VIEWER)
    page.force_login(viewer)
    listing = page.get("/models/")
    assert listing.status_code == 200
    assert "unsafe folder name" in listing.content.decode()
    assert 'href="/models/inj' not in listing.content.decode()


def api_user(name: str, role: str):  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(name)
    set_role(user, role)
    return user


def test_the_api_and_the_editor_refuse_unsafe_names(repo, operator):
    assert operator.post("/api/v1/models/a%3Bb/load").status_code == 409
    assert "invalid model name" in operator.post("/api/v1/models/a%3Bb/load").json()["message"]
    assert operator.get("/api/v1/models/a%3Bb/config").status_code == 404


# --- configs that change the code Triton runs ---------------------------------------------


def test_an_operator_cannot_switch_a_model_to_the_python_backend(repo, operator):
    config = repo / "plain" / "config.pbtxt"
    before = config.read_bytes()
    text = before.decode().replace('backend: "onnxruntime"', 'backend: "python"')
    response = put_config(operator, "plain", text)
    assert response.status_code == 403, response.content
    assert response.json()["field"] == "backend"
    assert "'onnxruntime' → 'python'" in response.json()["message"]
    assert "only admins" in response.json()["message"].lower()
    assert config.read_bytes() == before
    assert not ConfigRevision.objects.filter(model="plain", source="api").exists()
    denied = AuditEvent.objects.get(action="config.save", outcome="denied")
    assert denied.model_name == "plain" and "python" in denied.detail


def test_an_operator_cannot_add_execution_env_path_but_may_tune_the_model(repo, operator):
    config = repo / "pyadd" / "config.pbtxt"
    original = config.read_text()
    refused = put_config(operator, "pyadd", with_env_path(original))
    assert refused.status_code == 403 and refused.json()["field"] == "parameters"
    assert "EXECUTION_ENV_PATH" in refused.json()["message"]
    assert config.read_text() == original
    tuned = original.replace("max_batch_size: 0", "max_batch_size: 0\n# tuned")
    assert put_config(operator, "pyadd", tuned).status_code == 200
    assert config.read_text() == tuned


def test_an_admin_may_make_code_changes(repo, admin):
    config = repo / "pyadd" / "config.pbtxt"
    response = put_config(admin, "pyadd", with_env_path(config.read_text()))
    assert response.status_code == 200, response.content
    assert "EXECUTION_ENV_PATH" in config.read_text()
    warnings = [f for f in response.json()["findings"] if f["rule"].startswith("security.")]
    assert warnings and "only admins" in warnings[0]["message"].lower()


def test_the_editor_page_and_restore_refuse_an_operator_code_change(repo, operator, admin):
    config = repo / "pyadd" / "config.pbtxt"
    original = config.read_text()
    assert put_config(admin, "pyadd", with_env_path(original)).status_code == 200
    page = Client()
    page.force_login(api_user("otto", OPERATOR))
    current = saving.read_current("pyadd", servers.default())
    back = page.post("/models/pyadd/config/", {
        "mode": "text", "action": "save", "text": original, "base_sha": current.sha256,
    })  # fmt: skip
    assert back.status_code == 403
    assert "EXECUTION_ENV_PATH" in back.content.decode() and config.read_text() != original
    first = ConfigRevision.objects.filter(model="pyadd").order_by("id").first()
    assert first is not None
    restored = page.post(
        f"/models/pyadd/config/revisions/{first.pk}/restore",
        {"base_sha": current.sha256},
        follow=True,
    )
    assert "not restored" in restored.content.decode()
    assert "EXECUTION_ENV_PATH" in config.read_text()


def test_the_search_apply_and_trial_loads_use_the_same_gate(repo):
    before = parse_config((repo / "pyadd" / "config.pbtxt").read_text()).config
    after = parse_config(with_env_path((repo / "pyadd" / "config.pbtxt").read_text())).config
    operator_user = api_user("opal", OPERATOR)
    with pytest.raises(saving.CodeChangeRefused):
        saving.check_code_change("pyadd", before, after, operator_user, server=servers.default())
    with pytest.raises(saving.CodeChangeRefused):
        saving.check_code_change("pyadd", before, after, None, server=servers.default())
    saving.check_code_change(
        "pyadd", before, after, api_user("adam", ADMIN), server=servers.default()
    )
    from repository_app.editor import triton_actions

    verdict = triton_actions.try_config(servers.default(), "pyadd", after, operator_user)
    assert not verdict.ok and "only admins" in verdict.message.lower()


def test_code_changes_name_every_code_loading_field():
    base = parse_config('name: "m"\nbackend: "onnxruntime"\n').config
    changed = parse_config(
        'name: "m"\nbackend: "onnxruntime"\ndefault_model_filename: "other.onnx"\n'
        'model_operations { op_library_filename: "libcustom.so" }\n'
        'model_repository_agents { agents [ { name: "checksum" } ] }\n'
        "optimization { execution_accelerators { gpu_execution_accelerator [ { name: "
        '"tensorrt" parameters { key: "trt_extra_plugin_lib_paths" value: "/tmp/x.so" } } ] } }\n'
        'parameters [ { key: "precision" value: { string_value: "fp16" } } ]\n'
    ).config
    assert base is not None and changed is not None
    fields = {c.split(" ")[0] for c in code_changes(base, changed)}
    assert {"default_model_filename", "model_operations", "model_repository_agents",
            "gpu_execution_accelerator"} <= fields  # fmt: skip
    assert not any("precision" in c for c in code_changes(base, changed))


def test_the_validator_warns_on_code_loading_parameters():
    text = 'name: "m"\nbackend: "python"\nparameters [\n' + ENV_PATH + "\n]\n"
    warnings = [f for f in validate_text(text, folder_name="m") if f.rule.startswith("security")]
    assert len(warnings) == 1 and warnings[0].line == 4
    assert "bin/activate" in warnings[0].message


# --- code hidden in archives ---------------------------------------------------------------


@pytest.fixture()
def ov(repo: Path) -> Path:
    (repo / "ov" / "1").mkdir(parents=True)
    (repo / "ov" / "config.pbtxt").write_text(OPENVINO_CONFIG)
    return repo / "ov"


def executable(name: str, data: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o755
    return info


OPENVINO_FILES = [("model.xml", b"<?xml?>"), ("model.bin", b"\0\1\2\3")]
HIDDEN_CODE = {
    "bin/activate without a suffix": make_zip([*OPENVINO_FILES, ("bin/activate", b"id\n")]),
    "an activate script at the top": make_zip([*OPENVINO_FILES, ("activate", b"id\n")]),
    "a versioned shared object": make_zip([*OPENVINO_FILES, ("libtriton_x.so.1", b"lib")]),
    "a .pth import hook": make_zip([*OPENVINO_FILES, ("hook.pth", b"import os\n")]),
    "a nested packed environment": make_zip([*OPENVINO_FILES, ("envm.tar.gz", b"\x1f\x8b")]),
    "an ELF file under a data name": make_zip([*OPENVINO_FILES, ("weights.dat", b"\x7fELF\2\1")]),
    "a script under a data name": make_zip([*OPENVINO_FILES, ("notes.txt", b"#!/bin/sh\nid\n")]),
}


@pytest.mark.parametrize("what", sorted(HIDDEN_CODE))
def test_an_operator_cannot_smuggle_code_in_an_archive(ov, operator, what):
    before = tree(ov)
    _, done = upload(operator, HIDDEN_CODE[what], model="ov", filename="weights.zip")
    assert done.status_code == 403, (what, done.content)
    assert (
        "holds code" in done.json()["message"] and "only admins" in done.json()["message"].lower()
    )
    assert tree(ov) == before


def test_an_executable_mode_bit_counts_as_code(ov, operator):
    data = make_tar([("model.xml", b"<?xml?>"), ("model.bin", b"\0")])
    buffer = io.BytesIO(data)
    with tarfile.open(fileobj=buffer, mode="a") as archive:
        archive.addfile(executable("run", b"id\n"), io.BytesIO(b"id\n"))
    _, done = upload(operator, buffer.getvalue(), model="ov", filename="weights.tar")
    assert done.status_code == 403 and "executable mode bit" in done.json()["message"]


def test_an_admin_may_upload_an_archive_with_code(ov, admin):
    _, done = upload(admin, HIDDEN_CODE["bin/activate without a suffix"], model="ov",
                     filename="weights.zip")  # fmt: skip
    assert done.status_code == 201, done.content
    assert (ov / "2" / "bin" / "activate").read_bytes() == b"id\n"
    assert Upload.objects.get().is_code


def test_dali_pipelines_are_code(repo, operator):
    response = create(operator, model="pipe", new_model=True, backend="dali",
                      filename="model.dali", size=10)  # fmt: skip
    assert response.status_code == 403 and "only admins" in response.json()["message"].lower()


# --- the role is checked on every step of an upload ----------------------------------------


def test_a_demoted_user_can_neither_send_chunks_nor_complete(repo, operator):
    data = tiny_onnx()
    created = create(operator, model="plain", filename="model.onnx", size=len(data))
    upload_id = created.json()["id"]
    assert send(operator, upload_id, data[:20], 0).status_code == 200
    row = Upload.objects.get(pk=upload_id)
    set_role(row.user, VIEWER)
    refused = send(operator, upload_id, data[20:], 20)
    assert refused.status_code == 403 and "Operators and Admins can" in refused.json()["message"]
    set_role(row.user, OPERATOR)
    assert send(operator, upload_id, data[20:], 20).status_code == 200
    set_role(row.user, VIEWER)
    done = operator.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")
    assert done.status_code == 403
    assert not (repo / "plain" / "2").exists()


def test_an_admin_demoted_to_operator_cannot_publish_model_py(repo, admin):
    created = create(admin, model="pyadd", filename="model.py", size=len(MODEL_PY))
    assert created.status_code == 201, created.content
    upload_id = created.json()["id"]
    assert send(admin, upload_id, MODEL_PY, 0).status_code == 200
    user = Upload.objects.get(pk=upload_id).user
    user.is_superuser = False
    user.save()
    set_role(user, OPERATOR)
    done = admin.post(f"/api/v1/uploads/{upload_id}/complete?wait=1")
    assert done.status_code == 403 and "only admins" in done.json()["message"].lower()
    assert not (repo / "pyadd" / "2").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("model", ["list"]), ("model", None), ("filename", 7), ("size", [1]), ("size", True),
     ("new_model", "maybe"), ("version", 1.5), ("backend", {"a": 1}), ("sha256", 5)],
)  # fmt: skip
def test_upload_fields_of_the_wrong_type_are_refused_by_name(repo, operator, field, value):
    fields = {"model": "tiny", "new_model": True, "backend": "onnxruntime",
              "filename": "model.onnx", "size": 10, field: value}  # fmt: skip
    response = create(operator, **fields)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not Upload.objects.exists() and not (repo / "None").exists()


def test_upload_refusals_name_their_field(repo, operator):
    assert create(operator, model="plain", filename="x.onnx", size=10).json()["field"] == "filename"
    assert create(operator, model="plain", filename="model.onnx", size=0).json()["field"] == "size"
    assert (
        create(operator, model="nothere", filename="model.onnx", size=1).json()["field"] == "model"
    )


# --- links out of the repository -----------------------------------------------------------


def test_a_symlinked_config_outside_the_repository_is_never_read(repo, tmp_path, settings):
    secret = tmp_path / "secret.txt"
    secret.write_text("db password\n")
    (repo / "leak" / "1").mkdir(parents=True)
    os.symlink(secret, repo / "leak" / "config.pbtxt")
    viewer = Client()
    viewer.force_login(api_user("vic", VIEWER))
    for url in (
        "/models/leak/config/",
        "/api/v1/models/leak/config",
        "/models/leak/config/history/",
    ):
        response = viewer.get(url)
        assert response.status_code == 404, url
        assert "db password" not in response.content.decode()
    assert (
        "outside the model repository"
        in {m.name: m for m in repository.scan(repo)}["leak"].config_error
    )


def test_model_files_linked_out_of_the_repository_are_listed_not_read(repo, tmp_path):
    secret = tmp_path / "weights.bin"
    secret.write_bytes(b"x" * 100)
    os.symlink(secret, repo / "plain" / "1" / "extra.bin")
    viewer = Client()
    viewer.force_login(api_user("val", VIEWER))
    files = viewer.get("/api/v1/models/plain/versions/").json()[0]["files"]
    linked = next(f for f in files if f["path"] == "extra.bin")
    assert linked["sha256"] == "" and linked["size"] == 0


def test_an_upload_into_a_model_folder_linked_outside_is_refused(repo, tmp_path, operator):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "config.pbtxt").write_text(ONNX_LINKED)
    os.symlink(outside, repo / "linked")
    response = create(operator, model="linked", filename="model.onnx", size=10)
    assert (
        response.status_code == 409 and "outside the model repository" in response.json()["message"]
    )
    assert sorted(p.name for p in outside.iterdir()) == ["config.pbtxt"]


ONNX_LINKED = 'name: "linked"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'


def test_a_model_folder_linked_outside_is_never_loaded(repo, tmp_path):
    """Triton would load (and for the Python backend, run) what the link points to."""
    outside = tmp_path / "elsewhere"
    shutil.copytree(repo / "pyadd", outside)
    os.symlink(outside, repo / "linked")
    server = servers.default()
    assert Path(server.repository) == repo
    for action in ("load", "reload"):
        with pytest.raises(control.ActionRefused, match="outside the model repository"):
            control.run_action(server, action, "linked", "olga")
    assert not AuditEvent.objects.filter(model_name="linked").exclude(outcome="denied").exists()


def test_validate_config_flags_an_unsafe_folder_name(tmp_path):
    from repository_app.modelconfig import validate_path

    folder = tmp_path / "inj$(id)"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text('backend: "python"\n')
    rules = {f.rule: f for findings in validate_path(folder).values() for f in findings}
    assert "model.unsafe-name" in rules and "shell" in rules["model.unsafe-name"].message
