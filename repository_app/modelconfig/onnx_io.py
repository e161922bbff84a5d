"""Read an ONNX model's inputs/outputs and compare them with a config (onnxruntime models).

The comparison follows the ONNX Runtime backend (``ValidateInputs``/``ValidateOutputs``):
model inputs besides the config's may be sequence control inputs, implicit state and
batch inputs; ragged inputs are ``[-1]`` in the model; scalar tensors take dims of 1s;
batch outputs are not shape-checked. A model file that is empty, a Git LFS pointer or cut
short (a failed download) is named as such instead of being read as a model with no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tritonclient.grpc import model_config_pb2 as pb

from .findings import ERROR, WARNING, Finding

# onnx.TensorProto.DataType value -> Triton DataType name
_ONNX_TO_TRITON = {
    1: "TYPE_FP32",
    2: "TYPE_UINT8",
    3: "TYPE_INT8",
    4: "TYPE_UINT16",
    5: "TYPE_INT16",
    6: "TYPE_INT32",
    7: "TYPE_INT64",
    8: "TYPE_STRING",
    9: "TYPE_BOOL",
    10: "TYPE_FP16",
    11: "TYPE_FP64",
    12: "TYPE_UINT32",
    13: "TYPE_UINT64",
    16: "TYPE_BF16",
}

DEFAULT_MAX_BATCH_SIZE = 8


@dataclass(frozen=True)
class TensorSpec:
    """One model tensor as a config would declare it (dims include any batch dim)."""

    name: str
    data_type: str  # Triton name, "" when the ONNX type has no Triton equivalent
    dims: list[int]  # -1 for symbolic/unknown dimensions


@dataclass
class OnnxIO:
    """Inputs/outputs of an ONNX file plus what they imply for max_batch_size."""

    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)

    @property
    def supports_batching(self) -> bool:
        """True when every tensor has a variable first dimension (a batch dim)."""
        tensors = self.inputs + self.outputs
        return bool(tensors) and all(t.dims and t.dims[0] == -1 for t in tensors)

    @property
    def suggested_max_batch_size(self) -> int:
        return DEFAULT_MAX_BATCH_SIZE if self.supports_batching else 0

    def config_dims(self, spec: TensorSpec) -> list[int]:
        """Dims as the config lists them (batch dimension dropped when batching)."""
        return spec.dims[1:] if self.supports_batching else spec.dims

    def to_config(self, name: str) -> pb.ModelConfig:
        """A ModelConfig filled from the model ("fill from model" in the editor)."""
        config = pb.ModelConfig(
            name=name,
            backend="onnxruntime",
            max_batch_size=self.suggested_max_batch_size,
        )
        for spec in self.inputs:
            config.input.add(
                name=spec.name,
                data_type=pb.DataType.Value(spec.data_type or "TYPE_INVALID"),
                dims=self.config_dims(spec) or [1],
            )
        for spec in self.outputs:
            config.output.add(
                name=spec.name,
                data_type=pb.DataType.Value(spec.data_type or "TYPE_INVALID"),
                dims=self.config_dims(spec) or [1],
            )
        return config


_LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def model_file_problem(path: Path) -> tuple[str, str] | None:
    """(rule, message) when the model file at ``path`` is surely unusable, else None.

    Checks what a failed download or copy leaves: an empty file, a Git LFS pointer instead
    of the content, an ONNX file cut short. Costs a stat and, for ONNX, a walk over the
    top-level fields (seeking past their contents).
    """
    try:
        if not path.is_file():
            return None
        size = path.stat().st_size
        # An empty model.py is a different mistake (no TritonPythonModel), left to Triton.
        if size == 0 and path.suffix != ".py":
            return (
                "model-file.empty",
                f"{path.name} is empty (0 bytes): the download or copy failed; put the real "
                "model file there",
            )
        with path.open("rb") as fh:
            head = fh.read(len(_LFS_POINTER))
            if head == _LFS_POINTER:
                return (
                    "model-file.lfs-pointer",
                    f"{path.name} is a Git LFS pointer ({size} bytes), not the model: fetch the "
                    "content (git lfs pull) and copy the real file",
                )
            if path.suffix == ".onnx":
                fh.seek(0)
                problem = _onnx_structure_problem(fh, size)
                if problem and problem.startswith("truncated"):
                    return (
                        "onnx.truncated",
                        f"{path.name} is not a valid ONNX file ({problem}): download or export "
                        "it again",
                    )
                if problem:
                    return (
                        "onnx.unreadable",
                        f"{path.name} is not a readable ONNX model ({problem}): export it again",
                    )
    except OSError:
        return None
    return None


def _read_varint(fh: BinaryIO) -> int | None:
    result = shift = 0
    while True:
        byte = fh.read(1)
        if not byte:
            return None
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _onnx_structure_problem(fh: BinaryIO, size: int) -> str | None:
    """Walk ModelProto's top-level fields; say where the bytes stop making sense."""
    has_graph = False
    while (pos := fh.tell()) < size:
        try:
            tag = _read_varint(fh)
            if tag is None:
                return f"truncated at byte {size}"
            field_number, wire_type = tag >> 3, tag & 7
            if field_number == 0 or wire_type in (3, 4, 6, 7):
                return f"unexpected data at byte {pos}"
            if wire_type == 0:
                if _read_varint(fh) is None:
                    return f"truncated at byte {size}"
                continue
            length = {1: 8, 5: 4}.get(wire_type)
            if length is None:
                length = _read_varint(fh)
                if length is None:
                    return f"truncated at byte {size}"
            if fh.tell() + length > size:
                return (
                    f"truncated at byte {size}: a field that starts at byte {pos} needs "
                    f"{fh.tell() + length - size} more bytes"
                )
            has_graph = has_graph or (field_number == 7 and wire_type == 2)
            fh.seek(length, 1)
        except ValueError:
            return f"unexpected data at byte {pos}"
    return None if has_graph else "it has no graph"


def io_from_onnx(path: str | Path) -> OnnxIO:
    """Read graph inputs (minus initializers) and outputs of an ONNX file.

    Raises ``ValueError`` when the file is not a readable ONNX model (empty, a Git LFS
    pointer, truncated, or not ONNX), with a message that says which.
    """
    import onnx

    problem = model_file_problem(Path(path))
    if problem is not None:
        raise ValueError(problem[1])
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise ValueError(f"{path} is not a readable ONNX model: {exc}") from exc
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    return OnnxIO(
        inputs=[_spec(v) for v in graph.input if v.name not in initializers],
        outputs=[_spec(v) for v in graph.output],
    )


def _spec(value: object) -> TensorSpec:
    ttype = value.type.tensor_type  # type: ignore[attr-defined]
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim]
    return TensorSpec(value.name, _ONNX_TO_TRITON.get(ttype.elem_type, ""), dims)  # type: ignore[attr-defined]


def _dims_match(config_dims: list[int], model_dims: list[int]) -> bool:
    return len(config_dims) == len(model_dims) and all(
        c == m or c == -1 or m == -1 for c, m in zip(config_dims, model_dims, strict=True)
    )


def cross_check_onnx(
    config: pb.ModelConfig, model_path: Path, io: OnnxIO | None = None
) -> Iterator[Finding]:
    """Compare config inputs/outputs with the ONNX file (names, data types, dims)."""
    problem = model_file_problem(model_path) if io is None else None
    if problem is not None:
        yield Finding(ERROR, problem[0], problem[1], file=str(model_path))
        return
    try:
        io = io or io_from_onnx(model_path)
    except ValueError as exc:
        yield Finding(ERROR, "onnx.unreadable", f"{exc}: re-export the model", file=str(model_path))
        return
    batching = config.max_batch_size > 0
    ragged = {t.name for t in config.input if t.allow_ragged_batch}
    batch_outputs = {name for bo in config.batch_output for name in bo.target_name}
    # Tensors the backend adds to the config's inputs/outputs (ValidateInputs' count).
    sb = config.sequence_batching
    extra_inputs = {ci.name for ci in sb.control_input}
    extra_inputs |= {st.input_name for st in sb.state}
    extra_inputs |= {name for bi in config.batch_input for name in bi.target_name}
    extra_outputs = {st.output_name for st in sb.state}
    if batching:
        declared = {t.name for t in config.input} | {t.name for t in config.output}
        shape_checked = declared - ragged - batch_outputs
        for spec in io.inputs + io.outputs:
            if spec.name not in shape_checked:
                continue  # only the config's own tensors must carry the batch dimension
            if spec.dims and spec.dims[0] not in (-1,):
                yield Finding(
                    ERROR,
                    "onnx.batch-dim-fixed",
                    f"max_batch_size is {config.max_batch_size} but {spec.name} in the ONNX model "
                    f"has a fixed first dimension {spec.dims[0]} (shape {spec.dims}), so it cannot "
                    "take a batch: set max_batch_size: 0 or export with a dynamic batch axis",
                    "max_batch_size",
                )
                break
    for kind, declared, actual in (
        ("input", config.input, io.inputs),
        ("output", config.output, io.outputs),
    ):
        by_name = {spec.name: spec for spec in actual}
        for i, tensor in enumerate(declared):
            path = f"{kind}[{i}]"
            found = by_name.get(tensor.name)
            if found is None:
                allowed = ", ".join(sorted(by_name)) or "none"
                yield Finding(
                    ERROR,
                    f"onnx.unknown-{kind}",
                    f"unexpected inference {kind} '{tensor.name}', allowed {kind}s are: "
                    f"{allowed}: rename it to one of the model's {kind}s",
                    f"{path}.name",
                )
                continue
            spec = found
            declared_type = pb.DataType.Name(tensor.data_type)
            if (
                tensor.data_type != pb.TYPE_INVALID
                and spec.data_type
                and declared_type != spec.data_type
            ):
                yield Finding(
                    ERROR,
                    f"onnx.{kind}-data-type",
                    f"unable to load model: {kind} '{tensor.name}' is {declared_type} in the config "
                    f"but {spec.data_type} in the ONNX model: set data_type: {spec.data_type}",
                    f"{path}.data_type",
                )
            reshaped = (
                list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
            )
            if tensor.name in ragged or tensor.name in batch_outputs or not tensor.dims:
                if tensor.name in ragged and spec.dims != [-1]:
                    yield Finding(
                        ERROR,
                        "onnx.ragged-shape",
                        f"unable to load model: ragged input '{tensor.name}' must have shape "
                        f"[-1] in the ONNX model, which has {spec.dims}: export it as a "
                        "flat 1-D input or drop allow_ragged_batch",
                        f"{path}.allow_ragged_batch",
                    )
                continue
            if not spec.dims:
                if any(d != 1 for d in reshaped):
                    yield Finding(
                        ERROR,
                        f"onnx.{kind}-dims",
                        f"unable to load model: scalar tensor '{tensor.name}' should only "
                        f"provide 1 in the model configuration, got dims {reshaped}: set "
                        "dims: [ 1 ]",
                        f"{path}.dims",
                    )
                continue
            model_dims = spec.dims[1:] if batching else spec.dims
            if not _dims_match(reshaped, model_dims):
                yield Finding(
                    ERROR,
                    f"onnx.{kind}-dims",
                    _dims_message(kind, tensor.name, reshaped, model_dims, batching),
                    f"{path}.dims",
                )
        declared_names = {t.name for t in declared}
        declared_names |= extra_inputs if kind == "input" else extra_outputs
        for spec in actual:
            if spec.name not in declared_names and declared:
                yield Finding(
                    ERROR if kind == "input" else WARNING,
                    f"onnx.missing-{kind}",
                    f"the ONNX model has {kind} '{spec.name}' that the config does not declare: "
                    f"add it (data_type: {spec.data_type or '?'}, dims: "
                    f"{spec.dims[1:] if batching else spec.dims})",
                    kind,
                )


def _dims_message(
    kind: str, name: str, dims: list[int], model_dims: list[int], batching: bool
) -> str:
    """The dims mismatch, saying so when the config repeats the batch dimension."""
    base = f"model {kind} '{name}' has dims {dims} in the config but {model_dims} in the ONNX model"
    repeated = batching and len(dims) == len(model_dims) + 1 and dims[0] == -1
    if repeated and _dims_match(dims[1:], model_dims):
        return (
            f"{base} (batch dimension excluded): the config's dims include the batch "
            "dimension, which Triton adds itself because max_batch_size > 0; drop the "
            f"leading -1 (dims: {model_dims})"
        )
    note = " (batch dimension excluded)" if batching else ""
    return f"{base}{note}: set dims: {model_dims}"
