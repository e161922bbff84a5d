"""One "did you mean ...?" for every wrong name: enum values, field names, platforms.

``suggest(value, choices)`` is what the parser's messages use, so the editor (text and
form mode), the API and ``manage.py validate_config`` all suggest the same thing. Common
wrong names come first from an alias table (``TYPE_FLOAT`` and ``float32`` mean
``TYPE_FP32``, not the closest spelling ``TYPE_INT8``); then a value written without its
prefix (``FP32``, ``GPU``, ``NCHW``) or in another case; then the closest spelling.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

# What people write for Triton's data types (numpy, PyTorch, TensorFlow and C names).
DATA_TYPE_ALIASES = {
    "FLOAT": "TYPE_FP32",
    "FLOAT32": "TYPE_FP32",
    "F32": "TYPE_FP32",
    "SINGLE": "TYPE_FP32",
    "REAL": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "FLOAT16": "TYPE_FP16",
    "F16": "TYPE_FP16",
    "DOUBLE": "TYPE_FP64",
    "FLOAT64": "TYPE_FP64",
    "F64": "TYPE_FP64",
    "BFLOAT16": "TYPE_BF16",
    "INT": "TYPE_INT32",
    "INTEGER": "TYPE_INT32",
    "I32": "TYPE_INT32",
    "LONG": "TYPE_INT64",
    "I64": "TYPE_INT64",
    "SHORT": "TYPE_INT16",
    "CHAR": "TYPE_INT8",
    "BYTE": "TYPE_UINT8",
    "STRING": "TYPE_STRING",
    "STR": "TYPE_STRING",
    "BYTES": "TYPE_STRING",
    "TEXT": "TYPE_STRING",
    "OBJECT": "TYPE_STRING",
    "BOOLEAN": "TYPE_BOOL",
}

_PREFIX_RE = re.compile(r"^(?:TORCH|NP|NUMPY|TF|TENSORFLOW|DT)[._]")


def _normalise(value: str) -> str:
    return _PREFIX_RE.sub("", value.strip().upper())


def suggest(value: str, choices: Iterable[str]) -> str | None:
    """The choice ``value`` most likely meant, or None when nothing is close."""
    allowed = list(choices)
    if not allowed or value in allowed:
        return None
    norm = _normalise(value)
    bare = {c.split("_", 1)[1] if "_" in c else c: c for c in allowed}  # FP32 -> TYPE_FP32
    for key in (norm, norm.removeprefix("TYPE_")):
        alias = DATA_TYPE_ALIASES.get(key)
        if alias in allowed:
            return alias
        if key in bare and bare[key] != value:
            return bare[key]
    by_upper = {c.upper(): c for c in allowed}
    if norm in by_upper and by_upper[norm] != value:
        return by_upper[norm]  # only the case differs (max_Batch_size, kind_gpu)
    close = difflib.get_close_matches(value, allowed, n=1)
    return close[0] if close else None
