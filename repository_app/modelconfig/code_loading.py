"""The parts of a ModelConfig that make Triton load or run code on its host.

Only holders of ``team.upload_code`` (Admins) may change them, on every path that writes
a config or loads one with an override (editor, API, the search's Apply, trial loads and
the CLI). They are:

- ``backend``, ``platform`` and ``runtime``: which library or Python file serves the model
  (Triton also looks for ``libtriton_<backend>.so`` inside the model folder first);
- ``default_model_filename`` and ``cc_model_filenames``: which file of the version folder
  the backend opens (for the Python backend, which file it runs);
- ``model_operations.op_library_filename``: custom-op libraries the framework loads;
- ``model_repository_agents``: agents are shared libraries run on every load;
- parameters that name code or a place to load it from: the Python backend's
  ``EXECUTION_ENV_PATH`` (a packed environment whose ``bin/activate`` is sourced), and any
  parameter (of the model or of an execution accelerator) whose key says path, library,
  plugin, extension, directory, environment, script or module, or whose value is a path.

``code_changes(before, after)`` lists what a new config changes among these, in words;
``code_parameters(config)`` feeds the validator's warning.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

CODE_PERMISSION = "team.upload_code"
# Words of a parameter key (split at _ - . and case changes) that name code or its place.
_KEY_WORDS = {
    "path", "paths", "lib", "libs", "library", "libraries", "plugin", "plugins", "extension",
    "extensions", "dir", "dirs", "directory", "env", "environment", "script", "scripts",
    "module", "modules", "python", "preload", "so", "op", "ops", "code", "file", "filename",
}  # fmt: skip
_VALUE = re.compile(r"[/\\]|\$\$|\.(so(\.\d+)*|py|sh|pth|whl|tar\.gz|tgz|tar|zip)$", re.IGNORECASE)


def _words(key: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return {w.lower() for w in re.split(r"[\s_.\-]+", spaced) if w}


def is_code_parameter(key: str, value: str) -> bool:
    return bool(_words(key) & _KEY_WORDS or _VALUE.search(value.strip()))


def code_parameters(config: pb.ModelConfig) -> list[tuple[str, str, str]]:
    """(where, key, value) of every parameter that can point Triton at code: the model's
    own and those of its execution accelerators."""
    found = [
        ("parameters", key, param.string_value)
        for key, param in sorted(config.parameters.items())
        if is_code_parameter(key, param.string_value)
    ]
    accelerators = config.optimization.execution_accelerators
    for kind in ("gpu_execution_accelerator", "cpu_execution_accelerator"):
        for accelerator in getattr(accelerators, kind):
            for key, value in sorted(accelerator.parameters.items()):
                if is_code_parameter(key, value):
                    found.append((f"{kind} {accelerator.name}", key, value))
    return found


def _text(message: Any) -> str:
    return text_format.MessageToString(message, as_one_line=True)


def code_fields(config: pb.ModelConfig | None) -> dict[str, str]:
    """The code-relevant fields as comparable text ({} for no config)."""
    if config is None:
        return {}
    fields = {
        "backend": config.backend,
        "platform": config.platform,
        "runtime": config.runtime,
        "default_model_filename": config.default_model_filename,
        "cc_model_filenames": _text_map(config.cc_model_filenames),
        "model_operations": _text(config.model_operations),
        "model_repository_agents": _text(config.model_repository_agents),
    }
    for where, key, value in code_parameters(config):
        fields[f"{where} {key}"] = value
    return {k: v for k, v in fields.items() if v}


def _text_map(values: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def code_changes(before: pb.ModelConfig | None, after: pb.ModelConfig) -> list[str]:
    """What ``after`` changes among the code-loading fields of ``before``, in words, e.g.
    ["backend 'onnxruntime' → 'python'", "parameters EXECUTION_ENV_PATH set to '...'"]."""
    old, new = code_fields(before), code_fields(after)
    changes = []
    for field in sorted(old.keys() | new.keys()):
        a, b = old.get(field), new.get(field)
        if a == b:
            continue
        if a is None:
            changes.append(f"{field} set to {b!r}")
        elif b is None:
            changes.append(f"{field} {a!r} removed")
        else:
            changes.append(f"{field} {a!r} → {b!r}")
    return changes


def refusal(changes: list[str]) -> str:
    shown = "; ".join(changes[:4]) + (" …" if len(changes) > 4 else "")
    return (
        f"this config change makes Triton load or run different code ({shown}): only Admins "
        "can make it; nothing was changed"
    )
