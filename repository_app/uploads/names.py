"""Names that land on disk: model folders, version folders, model files and archive members.

Triton's rules: a model is a folder directly under the repository (no separators, no leading
dot); a version is a folder named by a positive integer without leading zeros. On top of
them: no NUL or control characters, nothing over 255 bytes, no double extensions that hide
what a file is, and only the file names the backend loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["InvalidName", "check_model_name"]

from ..disk import version_number
from ..modelconfig.backends import (
    DEFAULT_MODEL_FILENAMES,
    PLATFORM_BACKENDS,
    PLATFORM_MODEL_FILENAMES,
    TENSORFLOW_GRAPHDEF,
    TENSORFLOW_SAVEDMODEL,
)
from ..naming import InvalidName, check_model_name

MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
MAX_VERSION = 2**63 - 1  # Triton keeps versions as int64
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
# Files that run on the Triton host: only admins may upload them (team.upload_code).
# .pth files run their import lines when Python starts; wheels, eggs and zipapps are
# importable code; a nested archive can be an EXECUTION_ENV_PATH conda-pack environment,
# whose bin/activate the Python backend sources.
CODE_SUFFIXES = (
    ".py", ".pyc", ".pyo", ".pyd", ".pth", ".so", ".sh", ".bash", ".zsh", ".exe", ".dll",
    ".bat", ".cmd", ".whl", ".egg", ".pyz", ".jar",
)  # fmt: skip
NESTED_ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")
_SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$", re.IGNORECASE)  # libfoo.so.1.2
_CODE_FOLDERS = {"bin", "site-packages", "dist-packages", "__pycache__"}
# A last extension that makes a file executable behind an innocent first one ("x.onnx.py").
_DISGUISING = {s.lstrip(".") for s in CODE_SUFFIXES} | {"js", "jar", "ps1"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class BackendFiles:
    """What a version folder of this backend holds."""

    backend: str
    platform: str  # "" unless the backend needs one (TensorFlow)
    default_name: str  # the model file or folder Triton opens
    single_files: tuple[str, ...]  # names accepted as a single uploaded file
    required: tuple[str, ...]  # entries an archive must provide
    folder: bool = False  # the model is a folder (archive only)
    code: bool = False  # the model itself is code


BACKENDS: dict[str, BackendFiles] = {
    "onnxruntime": BackendFiles("onnxruntime", "", "model.onnx", ("model.onnx",), ("model.onnx",)),
    "tensorrt": BackendFiles("tensorrt", "", "model.plan", ("model.plan",), ("model.plan",)),
    "pytorch": BackendFiles("pytorch", "", "model.pt", ("model.pt",), ("model.pt",)),
    # A TensorFlow graph can hold ops that write files (WriteFile, py_func in a SavedModel):
    # a crafted one could plant a model.py that a later load runs. Code, then.
    "tensorflow_savedmodel": BackendFiles(
        "tensorflow",
        TENSORFLOW_SAVEDMODEL,
        "model.savedmodel",
        (),
        ("model.savedmodel/saved_model.pb",),
        folder=True,
        code=True,
    ),
    "tensorflow_graphdef": BackendFiles(
        "tensorflow",
        TENSORFLOW_GRAPHDEF,
        "model.graphdef",
        ("model.graphdef",),
        ("model.graphdef",),
        code=True,
    ),
    "openvino": BackendFiles("openvino", "", "model.xml", (), ("model.xml", "model.bin")),
    "python": BackendFiles("python", "", "model.py", ("model.py",), ("model.py",), code=True),
    # DALI runs model.dali as Python when it is an @autoserialize pipeline file.
    "dali": BackendFiles("dali", "", "model.dali", ("model.dali",), ("model.dali",), code=True),
}
BACKEND_CHOICES = [
    ("onnxruntime", "ONNX Runtime (model.onnx)"),
    ("tensorrt", "TensorRT (model.plan)"),
    ("pytorch", "PyTorch / LibTorch (model.pt)"),
    (
        "tensorflow_savedmodel",
        "TensorFlow SavedModel (model.savedmodel/ in an archive) - admins only",
    ),
    ("tensorflow_graphdef", "TensorFlow GraphDef (model.graphdef) - admins only"),
    ("openvino", "OpenVINO (model.xml + model.bin in an archive)"),
    ("python", "Python (model.py, or an archive with extra modules) - admins only"),
    ("dali", "DALI (model.dali: may be Python) - admins only"),
]


def backend_files(key: str) -> BackendFiles:
    try:
        return BACKENDS[key]
    except KeyError:
        known = ", ".join(BACKENDS)
        raise InvalidName(f"unknown backend {key!r}: choose one of {known}") from None


def backend_key_of(backend: str, platform: str, default_model_filename: str = "") -> str:
    """The BACKENDS key for an existing model's config (backend or platform)."""
    if platform in (TENSORFLOW_SAVEDMODEL, TENSORFLOW_GRAPHDEF):
        return platform
    backend = backend or PLATFORM_BACKENDS.get(platform, "")
    if backend == "tensorflow":
        return (
            TENSORFLOW_GRAPHDEF
            if default_model_filename == PLATFORM_MODEL_FILENAMES[TENSORFLOW_GRAPHDEF]
            else TENSORFLOW_SAVEDMODEL
        )
    if backend in BACKENDS:
        return backend
    raise InvalidName(
        f"uploads support the backends {', '.join(sorted(DEFAULT_MODEL_FILENAMES))} and "
        f"tensorflow; this model's config says backend {backend or platform or '(none)'!r}"
    )


def _common(what: str, name: str) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidName(f"the {what} is empty")
    if "\x00" in name:
        raise InvalidName(f"the {what} {name!r} contains a NUL byte")
    if _CONTROL.search(name):
        raise InvalidName(f"the {what} {name!r} contains control characters")
    if len(name.encode("utf-8", errors="surrogatepass")) > MAX_NAME_BYTES:
        raise InvalidName(f"the {what} is longer than {MAX_NAME_BYTES} bytes")
    if "/" in name or "\\" in name:
        raise InvalidName(f"the {what} {name!r} contains a path separator")
    if name in (".", ".."):
        raise InvalidName(f"the {what} may not be {name!r}")
    if name != name.strip():
        raise InvalidName(f"the {what} {name!r} starts or ends with white space")


def parse_version(value: object) -> int:
    """A version folder name: a positive integer without leading zeros."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    number = version_number(text) if isinstance(text, str) else None
    if number is None:
        raise InvalidName(
            f"version {value!r} is not a positive integer without leading zeros (Triton's rule "
            "for version folders)"
        )
    if number > MAX_VERSION:
        raise InvalidName(f"version {value!r} is larger than Triton's limit {MAX_VERSION}")
    return number


def has_double_extension(name: str) -> bool:
    """`model.onnx.py`, `weights.bin.sh`: a second extension that makes it something else."""
    parts = name.lstrip(".").split(".")
    return len(parts) >= 3 and parts[-1].lower() in _DISGUISING


def is_code_name(name: str) -> bool:
    return name.lower().endswith(CODE_SUFFIXES) or bool(_SHARED_OBJECT.search(name))


def code_member_reason(parts: tuple[str, ...], executable: bool = False) -> str:
    """Why an archive member counts as code ("" when it does not): its name, a shared
    object's soname, an executable mode bit, a folder code lives in (bin/, site-packages/),
    an activate script, or a nested archive (a packed Python environment)."""
    name = parts[-1]
    path = "/".join(parts)
    if is_code_name(name):
        return f"{path} is a code file"
    if executable:
        return f"{path} has an executable mode bit"
    if name.lower().startswith("activate"):
        return f"{path} is an environment activation script"
    if any(p.lower() in _CODE_FOLDERS for p in parts[:-1]):
        return f"{path} lies in a folder of executables or Python packages"
    if name.lower().endswith(NESTED_ARCHIVES):
        return f"{path} is an archive inside the archive (a packed environment can run code)"
    return ""


def archive_suffix(filename: str) -> str:
    """ ".zip", ".tar", ".tar.gz" (".tgz") or "" for a plain file."""
    lower = filename.lower()
    for suffix in ARCHIVE_SUFFIXES:
        if lower.endswith(suffix):
            return ".tar.gz" if suffix == ".tgz" else suffix
    return ""


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def check_upload_filename(files: BackendFiles, filename: str, *, new_model: bool = False) -> bool:
    """Check the name of the uploaded file; True when it is an archive.

    A single file for a new model may have any name: it is stored under the backend's
    default name (``resnet.onnx`` becomes ``1/model.onnx``). A version of an existing model
    must already carry that name. Either way a name that hides a second extension is
    refused, and the original name decides whether the upload counts as code."""
    _common("file name", filename)
    backend = files.platform or files.backend
    if archive_suffix(filename):
        stem = re.sub(r"\.(tar\.gz|tgz|tar|zip)$", "", filename, flags=re.IGNORECASE)
        if is_code_name(stem):
            raise InvalidName(f"the archive name {filename!r} hides another extension")
        return True
    if has_double_extension(filename):
        raise InvalidName(
            f"the file name {filename!r} has a double extension, which can hide what a file "
            f"is: rename it ({_a(backend)} model file is stored as "
            f"{' or '.join(files.single_files) or 'part of an archive'})"
        )
    if not files.single_files:
        raise InvalidName(
            f"{files.default_name} for {backend} is uploaded as an "
            f"archive (.zip, .tar or .tar.gz) holding {', '.join(files.required)}"
        )
    if new_model or filename in files.single_files:
        return False
    raise InvalidName(
        f"{_a(backend)} model file must be named "
        f"{' or '.join(files.single_files)} (Triton's default file name), got {filename!r}; "
        "folder formats and extra files go in an archive (.zip, .tar or .tar.gz)"
    )


def check_member_path(path: str) -> tuple[str, ...]:
    """A relative path inside an archive; returns its parts ('./' prefixes dropped)."""
    if "\x00" in path:
        raise InvalidName(f"archive member {path!r} contains a NUL byte")
    if "\\" in path:
        raise InvalidName(f"archive member {path!r} contains a backslash")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise InvalidName(f"archive member {path!r} is an absolute path")
    if len(path.encode("utf-8", errors="surrogatepass")) > MAX_PATH_BYTES:
        raise InvalidName(f"archive member path is longer than {MAX_PATH_BYTES} bytes")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for part in parts:
        if part == "..":
            raise InvalidName(f"archive member {path!r} leads out of the folder ('..')")
        _common("archive member name", part)
        if has_double_extension(part):
            raise InvalidName(f"archive member {path!r} has a double extension")
    return tuple(parts)
