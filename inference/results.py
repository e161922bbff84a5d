"""A Try's outputs, kept whole for an hour so that its page can offer each one as ``.npy``
and as JSON while it shows only the first values. Only the user who sent the request
reads them back. One folder per result under ``TRY_RESULTS_DIR``: ``meta.json`` and one
``.npy`` per output (BYTES as fixed-width bytes: a ``.npy`` that loads without pickles)."""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

TOKEN = re.compile(r"[0-9a-f]{32}")
_CHUNK = 65536  # values per piece of a streamed JSON download


class NoResult(LookupError):
    """No such result for this user (never sent, someone else's, or expired)."""


@dataclass(frozen=True)
class KeptOutput:
    name: str
    datatype: str
    path: Path


def _root() -> Path:
    root = Path(settings.TRY_RESULTS_DIR)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def _expire(root: Path) -> None:
    cutoff = time.time() - settings.TRY_RESULTS_TTL_S
    for folder in root.iterdir():
        try:
            if folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
        except FileNotFoundError:
            pass  # another request removed it meanwhile


def keep(
    user: Any,
    outputs: dict[str, np.ndarray],
    datatypes: dict[str, str] | None = None,
    request: dict[str, Any] | None = None,
) -> str:
    """Store ``outputs`` for ``user``, with the ``request`` that asked for them when it is
    small enough to be kept as a check (Triton's JSON shape); the token that names them."""
    root = _root()
    _expire(root)
    token = uuid.uuid4().hex
    folder = root / token
    folder.mkdir(mode=0o700)
    kept = []
    for i, (name, array) in enumerate(outputs.items()):
        stored = array.astype(np.bytes_) if array.dtype == object else array
        np.save(folder / f"{i}.npy", stored, allow_pickle=False)
        kept.append({"name": name, "datatype": (datatypes or {}).get(name, ""), "file": f"{i}.npy"})
    meta = {"user": getattr(user, "pk", None), "outputs": kept, "request": request}
    (folder / "meta.json").write_text(json.dumps(meta))
    return token


def _meta(user: Any, token: str) -> tuple[Path, dict[str, Any]]:
    if not TOKEN.fullmatch(token or ""):
        raise NoResult(token)
    folder = _root() / token
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (FileNotFoundError, ValueError):
        raise NoResult(token) from None
    if meta.get("user") != getattr(user, "pk", None):
        raise NoResult(token)
    return folder, meta


def request_of(user: Any, token: str) -> dict[str, Any] | None:
    """The request of ``user``'s result ``token`` (None when it was too large to keep)."""
    return _meta(user, token)[1].get("request")


def outputs_of(user: Any, token: str) -> list[KeptOutput]:
    folder, meta = _meta(user, token)
    return [
        KeptOutput(str(e["name"]), str(e.get("datatype", "")), folder / e["file"])
        for e in meta.get("outputs", [])
    ]


def output(user: Any, token: str, name: str) -> KeptOutput:
    """One kept output of ``user``'s result ``token`` (NoResult otherwise)."""
    folder, meta = _meta(user, token)
    for entry in meta.get("outputs", []):
        if entry.get("name") == name:
            return KeptOutput(name, str(entry.get("datatype", "")), folder / entry["file"])
    raise NoResult(name)


def as_json_chunks(kept: KeptOutput) -> Iterator[bytes]:
    """The output in Triton's response shape, ``{"name", "datatype", "shape", "data"}``,
    written piece by piece from the file (numbers read through a memory map)."""
    array = np.load(kept.path, mmap_mode="r", allow_pickle=False)
    flat = array.reshape(-1)
    head = {"name": kept.name, "datatype": kept.datatype, "shape": list(array.shape)}
    yield (json.dumps(head)[:-1] + ', "data": [').encode()
    for start in range(0, flat.size, _CHUNK):
        piece = flat[start : start + _CHUNK]
        if piece.dtype.kind == "S":
            items = [v.decode("utf-8", "replace") for v in piece.tolist()]
        elif piece.dtype.kind == "f" and not np.all(np.isfinite(piece)):
            items = [v if np.isfinite(v) else str(v) for v in piece.tolist()]  # "nan", "inf"
        else:
            items = piece.tolist()
        text = json.dumps(items)[1:-1]
        yield ((", " if start else "") + text).encode()
    yield b"]}"
