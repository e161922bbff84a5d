"""What Triton knows about platforms, backends and default model file names.

``complete_backend_fields`` mirrors Triton core's ``AutoCompleteBackendFields``:
it fills ``platform``/``backend``/``default_model_filename`` the way the server
does before validating, optionally looking at the first version folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

ENSEMBLE = "ensemble"

TENSORRT_PLAN = "tensorrt_plan"
ONNXRUNTIME_ONNX = "onnxruntime_onnx"
PYTORCH_LIBTORCH = "pytorch_libtorch"
TORCH_AOTI = "torch_aoti"  # Triton 2.67+: a torch.export / AOTInductor package, model.pt2
TENSORFLOW_SAVEDMODEL = "tensorflow_savedmodel"
TENSORFLOW_GRAPHDEF = "tensorflow_graphdef"

# platform -> backend; openvino, python and dali have no platform of their own.
PLATFORM_BACKENDS: dict[str, str] = {
    TENSORRT_PLAN: "tensorrt",
    ONNXRUNTIME_ONNX: "onnxruntime",
    PYTORCH_LIBTORCH: "pytorch",
    TENSORFLOW_SAVEDMODEL: "tensorflow",
    TENSORFLOW_GRAPHDEF: "tensorflow",
}
# torch_aoti (pytorch backend) stays out of PLATFORM_BACKENDS: uploads do not take it yet.
KNOWN_PLATFORMS = frozenset({*PLATFORM_BACKENDS, TORCH_AOTI, ENSEMBLE})

# Backends whose platform Triton checks against the backend (GetBackendType).
TYPED_BACKENDS = frozenset({"tensorrt", "onnxruntime", "pytorch", "tensorflow"})

# Backends shipped in Triton containers (others must be installed by hand).
KNOWN_BACKENDS = frozenset(
    {
        "tensorrt",
        "onnxruntime",
        "pytorch",
        "tensorflow",
        "openvino",
        "python",
        "dali",
        "fil",
        "identity",
        "repeat",
        "square",
        "vllm",
        "tensorrtllm",
        "armnn_tflite",
    }
)

# Backends that can fill inputs/outputs/max_batch_size from the model file (python: only
# when model.py defines auto_complete_config; dali: from the serialized pipeline).
AUTOCOMPLETE_BACKENDS = frozenset(
    {"tensorrt", "onnxruntime", "openvino", "tensorflow", "python", "dali"}
)
# Backends known NOT to fill data_type/dims: their AutoCompleteConfig only logs that it is
# unsupported (pytorch_backend src/pt and src/pt2), or they have none (identity, fil,
# tensorrtllm). fastertransformer fills data types of a few BERT/T5 tensors only
# (see ``fastertransformer_fills_data_type``). Any other backend may complete I/O itself.
NON_COMPLETING_BACKENDS = frozenset({"pytorch", "identity", "fil", "tensorrtllm"})
_FT_FILLED_TENSORS = {
    "bert": {"input_hidden_state", "output_hidden_state"},
    "T5-Encoder": {"output_hidden_state", "output_attentions"},
}

DEFAULT_MODEL_FILENAMES: dict[str, str] = {
    "tensorrt": "model.plan",
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "openvino": "model.xml",
    "python": "model.py",
    "dali": "model.dali",
}
PYTORCH_AOTI_FILENAME = "model.pt2"
PLATFORM_MODEL_FILENAMES: dict[str, str] = {
    TENSORFLOW_SAVEDMODEL: "model.savedmodel",
    TENSORFLOW_GRAPHDEF: "model.graphdef",
}


@dataclass(frozen=True)
class BackendFields:
    """The effective platform/backend/default file after Triton's auto-complete."""

    platform: str
    backend: str
    default_model_filename: str
    error: str = ""  # Triton's own error when it cannot determine the backend


def complete_backend_fields(
    platform: str,
    backend: str,
    default_model_filename: str,
    *,
    model_name: str | None = None,
    version_files: set[str] | None = None,
    is_dir: Callable[[str], bool] | None = None,
) -> BackendFields:
    """Fill platform/backend/default_model_filename like Triton's auto-complete.

    ``version_files`` is the content of the first version folder (None when the
    caller only has the text); ``is_dir`` tells whether an entry there is a folder.
    """
    files = version_files or set()
    has_version = version_files is not None
    directory = is_dir or (lambda _name: False)
    fname = default_model_filename

    if not platform and (not backend or backend == "tensorflow"):
        if fname == "model.savedmodel":
            platform = TENSORFLOW_SAVEDMODEL
        elif fname == "model.graphdef":
            platform = TENSORFLOW_GRAPHDEF
        elif not fname and has_version:
            if "model.savedmodel" in files and directory("model.savedmodel"):
                platform = TENSORFLOW_SAVEDMODEL
            if "model.graphdef" in files and not directory("model.graphdef"):
                platform = TENSORFLOW_GRAPHDEF
    if platform in (TENSORFLOW_SAVEDMODEL, TENSORFLOW_GRAPHDEF):
        return BackendFields(
            platform, backend or "tensorflow", fname or PLATFORM_MODEL_FILENAMES[platform]
        )

    probing = not platform and not fname and has_version

    def found(name: str, *, as_dir: bool | None = None) -> bool:
        """The version folder holds ``name`` (a file, a folder, or either)."""
        return probing and name in files and (as_dir is None or directory(name) == as_dir)

    trt = platform == TENSORRT_PLAN or fname == "model.plan" or found("model.plan", as_dir=False)
    if not backend and trt:
        backend = "tensorrt"
    if backend == "tensorrt":
        return BackendFields(platform or TENSORRT_PLAN, backend, fname or "model.plan")

    # An ONNX model may be a folder (large models with external data).
    ort = platform == ONNXRUNTIME_ONNX or fname == "model.onnx" or found("model.onnx")
    if not backend and ort:
        backend = "onnxruntime"
    if backend == "onnxruntime":
        return BackendFields(platform or ONNXRUNTIME_ONNX, backend, fname or "model.onnx")

    if not backend and (fname == "model.xml" or found("model.xml")):
        backend = "openvino"
    if backend == "openvino":
        return BackendFields(platform, backend, fname or "model.xml")

    if not backend:
        if platform in (PYTORCH_LIBTORCH, TORCH_AOTI) or fname in (
            "model.pt",
            PYTORCH_AOTI_FILENAME,
        ):
            backend = "pytorch"
        elif found("model.pt", as_dir=False):
            backend, platform = "pytorch", PYTORCH_LIBTORCH
        elif found(PYTORCH_AOTI_FILENAME, as_dir=False):
            backend, platform = "pytorch", TORCH_AOTI
    if backend == "pytorch":
        if platform == TORCH_AOTI:
            return BackendFields(platform, backend, fname or PYTORCH_AOTI_FILENAME)
        return BackendFields(platform or PYTORCH_LIBTORCH, backend, fname or "model.pt")

    if not backend and (fname == "model.py" or found("model.py")):
        backend = "python"
    if backend == "python":
        return BackendFields(platform, backend, fname or "model.py")

    if not backend and not platform and not fname and model_name is not None:
        # Custom backends are named by the folder: "model.<backend>".
        if "." not in model_name:
            return BackendFields(
                platform,
                backend,
                fname,
                error=(
                    "Invalid model name: Could not determine backend for model "
                    f"'{model_name}' with no backend in model configuration. Expected "
                    "model name of the form 'model.<backend_name>'."
                ),
            )
        custom = model_name.split(".", 1)[1]
        return BackendFields(platform, custom, f"model.{custom}")

    return BackendFields(platform, backend, fname or DEFAULT_MODEL_FILENAMES.get(backend, ""))


def io_completion(backend: str, python_auto_complete: bool | None) -> bool | None:
    """Whether ``backend`` fills missing data_type/dims while auto-complete is on.

    True: it does (from the model file, the DALI pipeline, model.py's
    auto_complete_config); False: known not to; None: cannot tell (a custom backend,
    a python model whose model.py we have not read).
    """
    if backend == "python":
        return python_auto_complete
    if backend in NON_COMPLETING_BACKENDS or backend == "fastertransformer":
        return False
    if backend in AUTOCOMPLETE_BACKENDS:
        return True
    return None


def fastertransformer_fills_data_type(model_type: str, tensor: str) -> bool:
    """The fastertransformer backend sets these data types itself, auto-complete or not."""
    return tensor in _FT_FILLED_TENSORS.get(model_type, set())


def backend_for_platform(platform: str) -> str:
    """The typed backend Triton pairs with ``platform`` ("" when none)."""
    return "pytorch" if platform == TORCH_AOTI else PLATFORM_BACKENDS.get(platform, "")
