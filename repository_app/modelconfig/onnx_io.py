"""Read an ONNX model's inputs/outputs and compare them with a config (onnxruntime models)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

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


def io_from_onnx(path: str | Path) -> OnnxIO:
    """Read graph inputs (minus initializers) and outputs of an ONNX file.

    Raises ``ValueError`` when the file is not a readable ONNX model.
    """
    import onnx

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
    try:
        io = io or io_from_onnx(model_path)
    except ValueError as exc:
        yield Finding(ERROR, "onnx.unreadable", f"{exc}: re-export the model", file=str(model_path))
        return
    batching = config.max_batch_size > 0
    if batching:
        for spec in io.inputs + io.outputs:
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
            model_dims = spec.dims[1:] if batching and spec.dims else spec.dims
            reshaped = (
                list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
            )
            if tensor.dims and not _dims_match(reshaped, model_dims):
                batch_note = " (batch dimension excluded)" if batching else ""
                yield Finding(
                    ERROR,
                    f"onnx.{kind}-dims",
                    f"model {kind} '{tensor.name}' has dims {reshaped} in the config but "
                    f"{model_dims} in the ONNX model{batch_note}: set dims: {model_dims}",
                    f"{path}.dims",
                )
        declared_names = {t.name for t in declared}
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
