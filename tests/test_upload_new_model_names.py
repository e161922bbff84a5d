"""A new model's single file may have any name: it is stored under the backend's default
name, and the result says so. Code stays code under any name; versions of existing models
still need the default name."""

# The fixtures come from test_upload_protocol; test arguments of the same name use them.
# ruff: noqa: F811

from __future__ import annotations

import pytest

from repository_app.models import Upload
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


@pytest.mark.parametrize("filename", ["resnet.onnx", "weights", "Model.ONNX", "my model v2.onnx"])
def test_a_new_model_takes_any_file_name_and_stores_it_as_model_onnx(repo, operator, filename):
    data = tiny_onnx()
    _, done = upload(
        operator, data, model="tiny", new_model=True, backend="onnxruntime", filename=filename
    )
    assert done.status_code == 201, done.content
    body = done.json()
    assert body["state"] == "published" and body["version"] == 1
    assert body["message"] == (
        "published as version 1; stored as model.onnx, the name Triton loads (uploaded as "
        f"{filename}); config.pbtxt generated from the ONNX graph"
    )
    assert sorted(p.name for p in (repo / "tiny" / "1").iterdir()) == ["model.onnx"]
    assert (repo / "tiny" / "1" / "model.onnx").read_bytes() == data
    assert 'backend: "onnxruntime"' in (repo / "tiny" / "config.pbtxt").read_text()
    assert staging_entries() == set()


def test_a_new_model_under_the_default_name_says_nothing_about_renaming(repo, operator):
    _, done = upload(
        operator, tiny_onnx(), model="tiny", new_model=True, backend="onnxruntime",
        filename="model.onnx",
    )  # fmt: skip
    assert done.json()["message"] == (
        "published as version 1; config.pbtxt generated from the ONNX graph"
    )
    assert (repo / "tiny" / "1" / "model.onnx").is_file()


def test_an_admins_python_file_under_another_name_becomes_model_py(repo, admin):
    _, done = upload(
        admin, MODEL_PY, model="adder", new_model=True, backend="python", filename="handler.py"
    )
    assert done.status_code == 201, done.content
    assert (
        "stored as model.py, the name Triton loads (uploaded as handler.py)"
        in (done.json()["message"])
    )
    assert (repo / "adder" / "1" / "model.py").read_bytes() == MODEL_PY
    assert not (repo / "adder" / "1" / "handler.py").exists()


# Renamed or not, the name as uploaded decides what the file is.
REFUSED_NEW_MODEL_NAMES = [
    ("evil.py", 403, "Only Admins can upload code"),
    ("libpwn.so", 403, "Only Admins can upload code"),
    ("hook.pth", 403, "Only Admins can upload code"),
    ("resnet.onnx.py", 400, "double extension"),
    ("resnet.onnx.sh", 400, "double extension"),
    ("evil.py.zip", 400, "hides another extension"),
    ("../resnet.onnx", 400, "path separator"),
    (" resnet.onnx", 400, "white space"),
]


def test_code_stays_code_and_bad_names_stay_refused_under_any_name(repo, operator):
    before = tree(repo)
    for filename, status, expected in REFUSED_NEW_MODEL_NAMES:
        response = create(operator, model="tiny", new_model=True, backend="onnxruntime",
                          filename=filename, size=10)  # fmt: skip
        assert response.status_code == status, (filename, response.content)
        assert expected in response.json()["message"], filename
    assert tree(repo) == before and not Upload.objects.exists()
    assert not (repo / "tiny").exists()


def test_refusals_read_an_onnxruntime_not_a_onnxruntime(repo, operator):
    double = create(operator, model="tiny", new_model=True, backend="onnxruntime",
                    filename="resnet.onnx.py", size=10).json()["message"]  # fmt: skip
    assert double == (
        "the file name 'resnet.onnx.py' has a double extension, which can hide what a file is: "
        "rename it (an onnxruntime model file is stored as model.onnx)"
    )
    version = create(operator, model="plain", filename="weights.onnx", size=10).json()["message"]
    assert version.startswith("an onnxruntime model file must be named model.onnx")
    for message in (double, version):
        assert "a onnxruntime" not in message


def test_a_version_of_an_existing_model_still_needs_the_default_name(repo, operator):
    response = create(operator, model="plain", filename="resnet.onnx", size=10)
    assert response.status_code == 400
    assert response.json()["field"] == "filename"
    assert (
        "must be named model.onnx (Triton's default file name), got 'resnet.onnx'"
        in (response.json()["message"])
    )
    assert not Upload.objects.exists()


def test_a_folder_format_still_needs_an_archive_under_any_name(repo, operator):
    response = create(operator, model="ov", new_model=True, backend="openvino",
                      filename="resnet.xml", size=10)  # fmt: skip
    assert response.status_code == 400
    assert "is uploaded as an archive" in response.json()["message"]


def test_the_audit_row_names_the_file_as_uploaded(repo, operator):
    upload(operator, tiny_onnx(), model="tiny", new_model=True, backend="onnxruntime",
           filename="resnet.onnx")  # fmt: skip
    row = AuditEvent.objects.get(action="upload", model_name="tiny", outcome="ok")
    assert "file resnet.onnx" in row.detail
