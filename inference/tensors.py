"""A Try request's inputs, from what the user typed, chose or uploaded, into arrays Triton
accepts; every refusal names its input and says what is wrong before anything is sent.

Per input, one of five ways to fill it (``mode``):
- ``values``: numbers (or, for BYTES, strings) as a JSON array, nested or flat, or
  separated by commas, spaces or new lines (BYTES: one string a line);
- ``random``: random values within the datatype's range (floats in [0, 1));
- ``zeros``;
- ``json``: Triton's own request shape, ``{"name", "shape", "datatype", "data"}`` or a
  whole ``{"inputs": [...]}`` document (this input is picked by name);
- ``npy``: a ``.npy`` file (no pickles), of the input's datatype.

The shape: the model's dims with each -1 given by the user (``dims``) or read from the
values, and the batch size in front when the model batches (``max_batch_size > 0``).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MODES = ("values", "random", "zeros", "json", "npy")
# Triton's datatypes (the KServe v2 names) as numpy holds them; BYTES as Python objects.
NUMPY = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
_SEPARATORS = re.compile(r"[\s,]+")


class BadInput(ValueError):
    """Nothing was sent; ``field`` names the input (``inputs.INPUT0``) or the request part."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class InputSpec:
    """One input as the model declares it: ``dims`` without the batch dimension, -1 where
    the model takes any size."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    optional: bool = False

    @property
    def dynamic(self) -> bool:
        return any(d < 0 for d in self.dims)

    def shown_dims(self) -> str:
        return "[" + ", ".join("any" if d < 0 else str(d) for d in self.dims) + "]"


@dataclass(frozen=True)
class Filled:
    """One input ready to send."""

    name: str
    datatype: str
    array: np.ndarray


def _fail(spec: InputSpec, message: str) -> BadInput:
    return BadInput(f"inputs.{spec.name}", f"{spec.name}: {message}")


def parse_dims(spec: InputSpec, text: str) -> tuple[int, ...] | None:
    """The user's dims for ``spec`` ("4, 16"), or None when blank."""
    text = (text or "").strip().strip("[]")
    if not text:
        return None
    try:
        dims = tuple(int(part) for part in _SEPARATORS.split(text) if part)
    except ValueError:
        raise _fail(
            spec, f"dims are whole numbers separated by commas, got {text[:40]!r}"
        ) from None
    check_dims(spec, dims)
    return dims


def check_dims(spec: InputSpec, dims: Sequence[int]) -> None:
    if len(dims) != len(spec.dims) or any(
        d < 0 or (want >= 0 and d != want) for d, want in zip(dims, spec.dims, strict=False)
    ):
        raise _fail(spec, f"shape {list(dims)} does not match the model's {spec.shown_dims()}")


def _full_shape(spec: InputSpec, dims: Sequence[int], batch: int | None) -> tuple[int, ...]:
    return ((batch,) if batch else ()) + tuple(dims)


def _needed_dims(spec: InputSpec, given: tuple[int, ...] | None) -> tuple[int, ...]:
    if given is not None:
        return given
    if spec.dynamic:
        raise _fail(spec, f"give its dims: the model takes {spec.shown_dims()}")
    return spec.dims


def _in_range(spec: InputSpec, values: np.ndarray) -> None:
    """Numbers the datatype cannot hold are refused, never wrapped or rounded to inf."""
    dtype: Any = NUMPY[spec.datatype]
    if spec.datatype in ("BYTES", "BOOL") or values.size == 0:
        return
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
            raise _fail(spec, f"{spec.datatype} holds whole numbers, not inf or nan")
        if values.dtype.kind == "f" and np.any(values != np.floor(values)):
            bad = values[values != np.floor(values)].flat[0]
            raise _fail(spec, f"{bad:g} is not a whole number ({spec.datatype})")
        low, high = values.min(), values.max()
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise _fail(
                spec, f"{bad:g} is out of {spec.datatype}'s range ({info.min} to {info.max})"
            )
        return
    finfo = np.finfo(dtype)
    finite = values[np.isfinite(values)]
    if finite.size and (finite.min() < finfo.min or finite.max() > finfo.max):
        bad = finite.min() if finite.min() < finfo.min else finite.max()
        raise _fail(spec, f"{bad:g} is out of {spec.datatype}'s range (±{float(finfo.max):.6g})")


def _as_array(spec: InputSpec, data: Any) -> np.ndarray:
    """Nested lists (or scalars) as an array of the input's datatype, range checked."""
    if spec.datatype == "BYTES":
        array = np.array(data, dtype=np.object_)
        flat = array.reshape(-1)
        for i, item in enumerate(flat):
            if isinstance(item, list):
                raise _fail(spec, "the nested lists are ragged: every row needs as many items")
            flat[i] = item.encode() if isinstance(item, str) else str(item).encode()
        return array
    if spec.datatype == "BOOL":
        array = np.array(data, dtype=np.object_)
        flat = array.reshape(-1)
        truth = {"true": True, "false": False, "1": True, "0": False}
        out = np.empty(flat.shape, dtype=np.bool_)
        for i, item in enumerate(flat):
            key = str(item).strip().lower()
            if isinstance(item, list) or key not in truth:
                raise _fail(spec, f"BOOL values are true/false or 1/0, got {str(item)[:20]!r}")
            out[i] = truth[key]
        return out.reshape(array.shape)
    try:
        numbers = np.array(data, dtype=np.float64 if NUMPY[spec.datatype].kind == "f" else None)
    except (ValueError, OverflowError):
        raise _fail(spec, "the nested lists are ragged or hold something not a number") from None
    if numbers.dtype.kind not in "iuf" and numbers.size:
        if numbers.dtype.kind == "b":
            numbers = numbers.astype(np.int64)
        else:
            bad = next((x for x in numbers.reshape(-1) if not _is_number(x)), numbers.flat[0])
            raise _fail(spec, f"{str(bad)[:20]!r} is not a number")
    if numbers.dtype.kind == "O":
        raise _fail(spec, "the nested lists are ragged")
    _in_range(spec, numbers.astype(np.float64) if numbers.dtype.kind == "f" else numbers)
    return numbers.astype(NUMPY[spec.datatype])


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _typed(spec: InputSpec, text: str) -> Any:
    """What the user typed: a JSON array (nested or flat), else separated values."""
    text = text.strip()
    if not text:
        raise _fail(spec, "no values given")
    if text.startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(
                spec, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
    if spec.datatype == "BYTES":
        return text.splitlines()
    parts = [p for p in _SEPARATORS.split(text) if p]
    out: list[Any] = []
    for part in parts:
        if spec.datatype == "BOOL":
            out.append(part)
            continue
        try:
            number = float(part) if NUMPY[spec.datatype].kind == "f" else int(part, 0)
        except ValueError:
            raise _fail(
                spec,
                f"{part[:20]!r} is not a {'number' if NUMPY[spec.datatype].kind == 'f' else 'whole number'}",
            ) from None
        out.append(number)
    return out


def _shaped(
    spec: InputSpec, array: np.ndarray, dims: tuple[int, ...] | None, batch: int | None
) -> np.ndarray:
    """``array`` in the shape the request sends: as given when it already is (with or
    without the batch dimension when the batch is 1), a flat list reshaped, else refused."""
    if array.ndim == len(spec.dims) + (1 if batch else 0):
        shape = tuple(array.shape)
        check_dims(spec, shape[1:] if batch else shape)
        if dims is not None and tuple(shape[1:] if batch else shape) != dims:
            raise _fail(spec, f"the values' shape {list(shape)} is not the dims given {list(dims)}")
        if batch and shape[0] != batch:
            raise _fail(spec, f"the values hold a batch of {shape[0]}, the batch size is {batch}")
        return array
    if batch == 1 and array.ndim == len(spec.dims) and array.ndim > 1:
        check_dims(spec, array.shape)
        return array.reshape((1, *array.shape))
    if array.ndim <= 1:
        wanted = _flat_target(spec, array.size, dims, batch)
        return array.reshape(wanted)
    raise _fail(
        spec,
        f"shape {list(array.shape)} does not match the model's {spec.shown_dims()}"
        + (f" with a batch of {batch} in front" if batch else ""),
    )


def _flat_target(
    spec: InputSpec, count: int, dims: tuple[int, ...] | None, batch: int | None
) -> tuple[int, ...]:
    """The shape a flat list of ``count`` values fills: the dims given or the model's, one
    unknown dimension read from the count."""
    known = dims or spec.dims
    per_batch = count // (batch or 1)
    unknown = [i for i, d in enumerate(known) if d < 0]
    if len(unknown) > 1:
        raise _fail(spec, f"give its dims: the model takes {spec.shown_dims()}")
    resolved = list(known)
    if unknown:
        rest = math.prod(d for d in known if d >= 0)
        if rest == 0 or per_batch % rest:
            raise _fail(spec, f"{count} values do not fill {spec.shown_dims()}")
        resolved[unknown[0]] = per_batch // rest
    want = _full_shape(spec, resolved, batch)
    if math.prod(want) != count:
        raise _fail(spec, f"{count} values given, the shape {list(want)} takes {math.prod(want)}")
    return want


def _from_json_document(spec: InputSpec, text: str) -> tuple[Any, list[int] | None]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(
            spec, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if isinstance(document, dict) and isinstance(document.get("inputs"), list):
        found = [
            i for i in document["inputs"] if isinstance(i, dict) and i.get("name") == spec.name
        ]
        if not found:
            raise _fail(spec, "the document's inputs have none of this name")
        document = found[0]
    if not isinstance(document, dict) or "data" not in document:
        raise _fail(spec, 'the JSON is {"name", "shape", "datatype", "data"} or {"inputs": [...]}')
    datatype = document.get("datatype")
    if datatype is not None and datatype != spec.datatype:
        raise _fail(spec, f"the document says {datatype}, the model wants {spec.datatype}")
    shape = document.get("shape")
    if shape is not None and (
        not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
    ):
        raise _fail(spec, "the document's shape is a list of whole numbers")
    return document["data"], shape


def _from_npy(spec: InputSpec, encoded: str) -> np.ndarray:
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _fail(spec, "the .npy upload is not base64") from None
    try:
        array = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise _fail(spec, f"not a .npy file numpy reads without pickles ({exc})") from None
    if not isinstance(array, np.ndarray):
        raise _fail(spec, "a .npy file, not .npz")
    want = NUMPY[spec.datatype]
    if spec.datatype == "BYTES":
        if array.dtype.kind not in "SU":
            raise _fail(spec, f"the .npy holds {array.dtype}, BYTES wants strings")
        return np.vectorize(
            lambda v: v.encode() if isinstance(v, str) else bytes(v), otypes=[object]
        )(array)
    if array.dtype != want:
        raise _fail(spec, f"the .npy holds {array.dtype}, the model wants {spec.datatype} ({want})")
    return array


def _random(spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dtype: Any = NUMPY[spec.datatype]
    if spec.datatype == "BYTES":
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        return np.array(
            ["".join(rng.choice(letters, 8)).encode() for _ in range(math.prod(shape))],
            dtype=object,
        ).reshape(shape)
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(int(info.min), int(info.max), size=shape, dtype=dtype, endpoint=True)
    return rng.random(size=shape).astype(dtype)


def fill(
    spec: InputSpec,
    mode: str,
    *,
    values: str = "",
    dims: str = "",
    batch: int | None = None,
    rng: np.random.Generator | None = None,
) -> Filled:
    """One input, filled as ``mode`` says (``values`` holds the text, JSON or base64 .npy)."""
    if spec.datatype not in NUMPY:
        raise _fail(spec, f"{spec.datatype} is not one Try can send yet")
    if mode not in MODES:
        raise _fail(spec, f"fill with one of {', '.join(MODES)}, not {mode!r}")
    given = parse_dims(spec, dims)
    if mode in ("random", "zeros"):
        full = _full_shape(spec, _needed_dims(spec, given), batch)
        if mode == "zeros":
            zero = (
                np.full(full, b"", dtype=object)
                if spec.datatype == "BYTES"
                else np.zeros(full, NUMPY[spec.datatype])
            )
            return Filled(spec.name, spec.datatype, zero)
        return Filled(spec.name, spec.datatype, _random(spec, full, rng or np.random.default_rng()))
    if mode == "npy":
        array = _from_npy(spec, values)
        return Filled(spec.name, spec.datatype, _shaped(spec, array, given, batch))
    if mode == "json":
        data, shape = _from_json_document(spec, values)
        array = _as_array(spec, data)
        if shape is not None:
            if math.prod(shape) != array.size:
                raise _fail(
                    spec,
                    f"the document's shape {shape} takes {math.prod(shape)} values, its data holds {array.size}",
                )
            array = array.reshape(shape)
        return Filled(spec.name, spec.datatype, _shaped(spec, array, given, batch))
    array = _as_array(spec, _typed(spec, values))
    return Filled(spec.name, spec.datatype, _shaped(spec, array, given, batch))
