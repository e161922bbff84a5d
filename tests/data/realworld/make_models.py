"""Write the tiny ONNX files of this corpus (run from the repository root; output is committed).

Each graph only has the inputs and outputs a real model of that shape has (names, types,
symbolic batch axes); the nodes are Identity ops, never a real network. The broken files
imitate failed downloads: empty, cut short, a Git LFS pointer.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
I32, I64, U64, F32, U8 = (
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT64,
    TensorProto.FLOAT,
    TensorProto.UINT8,
)


def graph(path: str, inputs: list[tuple], outputs: list[tuple]) -> None:
    """inputs/outputs: (name, elem type, shape); outputs copy the first input."""
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    nodes = [helper.make_node("Identity", [inputs[0][0]], [o[0]]) for o in outputs]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outs))
    target = HERE / path
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))


def main() -> None:
    # The quickstart sequence models: the data tensor plus the control tensors the
    # sequence batcher feeds (START/END/READY, CORRID in the dynamic one).
    controls = [("START", I32, ["B", 1]), ("END", I32, ["B", 1]), ("READY", I32, ["B", 1])]
    graph(
        "sequence_quickstart/simple_sequence/1/model.onnx",
        [("INPUT", I32, ["B", 1]), *controls],
        [("OUTPUT", I32, ["B", 1])],
    )
    graph(
        "sequence_quickstart/simple_dyna_sequence/1/model.onnx",
        [("INPUT", I32, ["B", 1]), *controls, ("CORRID", U64, ["B", 1])],
        [("OUTPUT", I32, ["B", 1])],
    )
    # Implicit state (qa_sequence_implicit_model_repository shape): state in and out.
    graph(
        "implicit_state/onnx_sequence_state/1/model.onnx",
        [
            ("INPUT", I32, ["B", 1]),
            ("START", I32, ["B", 1]),
            ("READY", I32, ["B", 1]),
            ("INPUT_STATE", I32, ["B", 1]),
        ],
        [("OUTPUT", I32, ["B", 1]), ("OUTPUT_STATE", I32, ["B", 1])],
    )
    # Ragged batching: the ragged input is flat [-1], the batch input is [-1] too.
    graph(
        "ragged_batching/onnx_ragged/1/model.onnx",
        [("RAGGED_INPUT", F32, ["N"]), ("BATCH_AND_SIZE_INPUT", F32, ["M"])],
        [("OUTPUT", F32, ["B", 4])],
    )
    # A detector taking any image size (HWC, uint8) and a sentence encoder taking token
    # embeddings of any length: leading -1s in dims that are not batch dimensions.
    graph(
        "variable_sizes/detector_hwc/1/model.onnx",
        [("images", U8, ["batch", "height", "width", 3])],
        [("boxes", F32, ["batch", "detections", 4])],
    )
    graph(
        "variable_sizes/sentence_encoder/1/model.onnx",
        [("token_embeddings", F32, ["batch", "tokens", 384])],
        [("sentence_embedding", F32, ["batch", 384])],
    )
    # A config that repeats the batch dimension in dims (the sure case).
    graph(
        "batch_dim_repeated/classifier/1/model.onnx",
        [("input", F32, ["batch", 3, 224, 224])],
        [("logits", F32, ["batch", 1000])],
    )
    # Model Analyzer's variants of one ONNX model.
    graph(
        "model_analyzer_variants/add_sub_config_2/1/model.onnx",
        [("INPUT0", F32, ["B", 16]), ("INPUT1", F32, ["B", 16])],
        [("OUTPUT0", F32, ["B", 16]), ("OUTPUT1", F32, ["B", 16])],
    )
    graph(
        "strict_inferred_backend/densenet_like/1/model.onnx",
        [("data_0", F32, [3, 224, 224])],
        [("fc6_1", F32, [1000])],
    )
    # A streaming ASR encoder (sherpa/wenet shape): feature chunks in, log-probs out.
    graph(
        "template_with_error/encoder/1/encoder.onnx",
        [
            ("chunk", F32, ["B", "T", 80]),
            ("START", F32, ["B", 1]),
            ("READY", F32, ["B", 1]),
        ],
        [("log_probs", F32, ["B", "T", 500])],
    )
    # Failed downloads: a good model cut short, an empty file, a Git LFS pointer.
    graph(
        "failed_download/truncated/1/model.onnx",
        [("x", F32, ["B", 3, 32, 32])],
        [("y", F32, ["B", 10])],
    )
    truncated = HERE / "failed_download/truncated/1/model.onnx"
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) * 2 // 3])
    (HERE / "failed_download/empty/1").mkdir(parents=True, exist_ok=True)
    (HERE / "failed_download/empty/1/model.onnx").write_bytes(b"")
    (HERE / "failed_download/lfs_pointer/1").mkdir(parents=True, exist_ok=True)
    (HERE / "failed_download/lfs_pointer/1/model.onnx").write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        "size 102502400\n"
    )


if __name__ == "__main__":
    main()
