"""Triton's load failures, explained where Triton's own words leave a user guessing.

Triton's message is always kept verbatim; an explanation is added after it. One place, so
the model pages, the live outcome, the API (``?wait=1``) and the CLI say the same thing:
``control.run_action`` builds every load outcome through ``explain_load_failure``.
"""

from __future__ import annotations

import re

# Triton 2.x words it in several ways, by version and by how the backend was named:
#   unable to find backend library for backend 'onnxruntime', try specifying runtime ...
#   unable to find 'libtriton_onnxruntime.so' for model 'm', searched: ...
#   unable to find backend library 'libtriton_custom.so' for model 'm'
_MISSING_BACKEND = (
    re.compile(r"unable to find backend library for backend '(?P<name>[^']+)'"),
    re.compile(r"unable to find backend library '(?P<name>[^']+)'"),
    re.compile(r"unable to find '(?P<name>[^']*triton_[^']+\.so)'"),
)
_LIBRARY = re.compile(r"^(?:lib)?triton_(?P<backend>.+?)\.so$")
# Backends shipped in NVIDIA's tritonserver:<yy.mm>-py3 images.
_IN_NVIDIA_IMAGES = {
    "onnxruntime", "tensorrt", "pytorch", "tensorflow", "openvino", "python", "dali", "fil",
}  # fmt: skip


def missing_backend(message: str) -> str:
    """The backend Triton could not find, from a load failure ("" when that was not it)."""
    for pattern in _MISSING_BACKEND:
        found = pattern.search(message)
        if found:
            name = found.group("name").rsplit("/", 1)[-1]
            library = _LIBRARY.match(name)
            return library.group("backend") if library else name
    return ""


def explain_load_failure(message: str) -> str:
    """Triton's message, plus what it means when it is one of the failures above."""
    backend = missing_backend(message)
    if not backend:
        return message
    verbatim = message.rstrip().rstrip(";").rstrip()  # Triton ends it with ".;\n"
    text = (
        f"{verbatim}{'' if verbatim.endswith('.') else '.'} This Triton has no {backend} "
        "backend: the model may be fine, but this server cannot run it."
    )
    if backend != "python":
        text += (
            " The tritonserver that `make run` starts (from the nvidia-pytriton wheel) serves "
            "Python models only."
        )
    if backend in _IN_NVIDIA_IMAGES:
        text += (
            " NVIDIA's production images (nvcr.io/nvidia/tritonserver:<yy.mm>-py3, the one "
            "docker-compose.yml runs) have it."
        )
    else:
        text += " Install the backend in the server's --backend-directory."
    return text
