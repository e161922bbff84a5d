"""Fill from model (ONNX), and the server-level rules fed by the attached Triton."""

import shutil
from pathlib import Path

import onnx
import pytest
from django.test import Client
from onnx import TensorProto, helper

from registry import servers
from repository_app.editor import fill
from repository_app.editor.fill import FillError
from repository_app.server_facts import server_facts

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _onnx(path: Path) -> None:
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 8, 8])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 10])
    w = helper.make_tensor("w", TensorProto.FLOAT, [192, 10], [0.0] * 1920)
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 192])
    nodes = [
        helper.make_node("Reshape", ["images", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["scores"]),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], [w, shape])
    onnx.save(helper.make_model(graph), path)


def test_fill_from_model_reads_the_onnx_graph(settings, tmp_path):
    folder = tmp_path / "classifier"
    (folder / "1").mkdir(parents=True)
    _onnx(folder / "1" / "model.onnx")
    settings.MODEL_REPOSITORY = tmp_path
    text, note = fill.fill_from_model(
        "classifier", 'name: "classifier"\nplatform: "onnxruntime_onnx"\n', servers.default()
    )
    assert 'name: "images"' in text and "dims: [ 3, 8, 8 ]" in text and "TYPE_FP32" in text
    assert "max_batch_size: 8" in text  # a symbolic first dimension: batching
    assert note.startswith("Inputs and outputs filled from 1/model.onnx")
    for bad_text, message in (("max_batch_size: [", "syntax"),):
        with pytest.raises(FillError, match=message):
            fill.fill_from_model("classifier", bad_text, servers.default())
    (folder / "1" / "model.onnx").write_bytes(b"not onnx")
    with pytest.raises(FillError, match="not a readable ONNX model"):
        fill.fill_from_model("classifier", 'name: "classifier"\n', servers.default())


def test_fill_from_model_says_why_it_cannot(settings, triton, admin_user):
    client = Client()
    client.force_login(admin_user)
    text = (triton.repository / "add_sub" / "config.pbtxt").read_text()
    response = client.post(
        "/models/add_sub/config/", {"mode": "text", "action": "fill", "text": text, "base_sha": ""}
    )
    assert response.status_code == 422
    assert (
        "no model.onnx in version 1: fill from model reads ONNX files only"
        in response.content.decode()
    )
    assert (triton.repository / "add_sub" / "config.pbtxt").read_text() == text


def test_kind_gpu_on_this_cpu_only_triton_is_an_error_with_the_reason(settings, triton, tmp_path):
    from repository_app.editor import saving

    facts = server_facts(servers.default())
    assert facts is not None and facts.gpu_ids == []
    gpu = (
        (triton.repository / "add_sub" / "config.pbtxt").read_text().replace("KIND_CPU", "KIND_GPU")
    )
    findings = [f for f in saving.editor_findings(gpu, "add_sub", servers.default()) if f.is_error]
    assert any("KIND_GPU" in f.message and "no GPUs" in f.message for f in findings), findings
    shutil.rmtree(tmp_path, ignore_errors=True)
