"""Bad model, version and file names: a clear 4xx message each, and nothing on disk."""

# The fixtures come from test_upload_protocol; test arguments of the same name use them.
# ruff: noqa: F811

from __future__ import annotations

import pytest

from repository_app.models import Upload
from repository_app.uploads import names

from .test_upload_protocol import admin, create, operator, repo, staging_entries, tree  # noqa: F401

pytestmark = pytest.mark.django_db

BAD_MODEL_NAMES = [
    ("", "empty"),
    (".hidden", "starts with '.'"),
    (".", "may not be '.'"),
    ("..", "may not be '..'"),
    ("../etc", "path separator"),
    ("a/b", "path separator"),
    ("/abs", "path separator"),
    ("a\\b", "path separator"),
    ("nul\x00byte", "NUL byte"),
    ("tab\tname", "control characters"),
    (" padded", "white space"),
    ("x" * 129, "longer than 128 characters"),
    # The Python backend starts its stub through `bash -c` with the model path unquoted.
    ("inj$(id)", "contains '$' '(' ')'"),
    ('x"><img src=x>', "contains"),
    ("a;b", "contains ';'"),
    ("a|b", "contains '|'"),
    ("a`id`", "contains '`'"),
    ("two words", "contains ' '"),
    ("模型", "only ASCII letters, digits"),
    ("-rf", "must start with a letter, a digit or '_'"),
]
BAD_VERSIONS = [
    ("0", "positive integer"),
    ("01", "without leading zeros"),
    ("-1", "positive integer"),
    ("1.5", "positive integer"),
    ("1e3", "positive integer"),
    ("../1", "positive integer"),
    (" 2", "positive integer"),
    (str(2**63), "larger than Triton's limit"),
]
BAD_FILE_NAMES = [
    ("model.onnx.py", "double extension"),
    ("model.py.sh", "double extension"),
    ("weights.onnx", "must be named model.onnx"),
    ("model.ONNX", "must be named model.onnx"),
    ("../model.onnx", "path separator"),
    ("/tmp/model.onnx", "path separator"),
    ("model\x00.onnx", "NUL byte"),
    ("..", "may not be '..'"),
    ("m" * 251 + ".onnx", "longer than 255 bytes"),
    ("evil.py.zip", "hides another extension"),
]


@pytest.mark.parametrize("field", ["model", "version", "filename"])
def test_every_bad_name_gets_a_clear_4xx_message_and_nothing_is_written(repo, admin, field):
    before = tree(repo)
    cases = {"model": BAD_MODEL_NAMES, "version": BAD_VERSIONS, "filename": BAD_FILE_NAMES}[field]
    for value, expected in cases:
        fields = {"model": "plain", "filename": "model.onnx", "size": 10, field: value}
        response = create(admin, **fields)
        assert 400 <= response.status_code < 500, (value, response.content)
        message = response.json()["message"]
        assert expected in message, (value, message)
    assert tree(repo) == before
    assert staging_entries() == set()
    assert not Upload.objects.exists()


def test_a_new_model_needs_a_known_backend_and_a_free_name(repo, operator):
    unknown = create(operator, model="m", new_model=True, backend="caffe", filename="x", size=1)
    assert unknown.status_code == 400 and "unknown backend 'caffe'" in unknown.json()["message"]
    taken = create(operator, model="plain", new_model=True, backend="onnxruntime",
                   filename="model.onnx", size=1)  # fmt: skip
    assert taken.status_code == 409 and "already exists" in taken.json()["message"]
    missing = create(operator, model="nothere", filename="model.onnx", size=1)
    assert missing.status_code == 404 and "create the model first" in missing.json()["message"]


def test_folder_formats_must_come_as_an_archive(repo, admin):
    response = create(admin, model="tf", new_model=True, backend="tensorflow_savedmodel",
                      filename="saved_model.pb", size=10)  # fmt: skip
    assert response.status_code == 400
    assert "uploaded as an archive" in response.json()["message"]


def test_the_name_rules_accept_the_safe_set():
    for good in ("resnet50", "bert-base_v1.2", "A" * 128, "_private", "2stage"):
        assert names.check_model_name(good) == good
    assert names.parse_version("1") == 1 and names.parse_version(42) == 42
    assert names.check_member_path("./model.savedmodel/variables/variables.data-00000-of-00001")
    assert names.archive_suffix("weights.TAR.GZ") == ".tar.gz"
    assert names.archive_suffix("weights.tgz") == ".tar.gz"
