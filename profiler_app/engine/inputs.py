"""Input tensors for a sweep, built from the model's metadata and config.

The shapes follow perf_analyzer's conventions: `shapes` gives the full shape of an input
*without* the batch dimension (like `--shape NAME:d1,d2`) and is required exactly where the
model declares a variable (-1) dimension. Data is random (seeded, and random the way
perf_analyzer's is: see `_random_sample`), zeros, or taken from a JSON document in
perf_analyzer's `--input-data` format:

    {"data": [{"INPUT0": [1, 2, ...]}, {"INPUT0": {"content": [...], "shape": [16]}}]}

Each entry of "data" is one sample of every input (no batch dimension); a request with
batch size b stacks b consecutive samples (cycling), and successive requests walk the
samples round-robin. Errors in a document name the input and the sample (its index in
"data", from 0). Its names must be the model's: an input it lacks (one the config marks
`optional` may be left out of every sample) or a name the model does not have (a preset
for another backend, a misspelling: it would never be sent) is refused, naming both lists.

The sweep's preflight builds the payloads in the web process, so sizes are counted before
anything is allocated: at most MAX_REQUEST_BYTES per request, whatever the shapes say.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

MAX_PAYLOADS = 64  # distinct pre-built requests kept per sweep
MAX_REQUEST_BYTES = 256 * 2**20  # one request's tensors, batch included
MAX_ELEMENTS = MAX_REQUEST_BYTES  # per sample: no element takes less than a byte
STRING_LENGTH = 128  # perf_analyzer's --string-length default, for random BYTES elements
STRING_CHARS = string.ascii_letters + string.digits + "-_"


class InputError(ValueError):
    """The inputs cannot be built; the message names the input and what is missing."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str  # Triton type name: FP32, INT64, BYTES...
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False  # the config's `optional: true`: JSON data may leave it out


@dataclass(frozen=True)
class TensorData:
    name: str
    datatype: str
    array: np.ndarray  # with the batch dimension when the model batches


def input_specs(metadata: Mapping[str, Any], config: Mapping[str, Any]) -> list[InputSpec]:
    """The inputs as (name, datatype, dims without batch) from metadata and config JSON."""
    config = config.get("config", config)  # gRPC's as_json wraps the config
    batching = int(config.get("max_batch_size", 0) or 0) > 0
    optional = {i.get("name") for i in config.get("input", []) if i.get("optional")}
    specs = []
    for item in metadata.get("inputs", []):
        dims = [int(d) for d in item.get("shape", [])]
        if batching and dims:
            dims = dims[1:]
        name = item["name"]
        specs.append(InputSpec(name, item["datatype"], tuple(dims), name in optional))
    return specs


def _json_inputs(
    specs: Sequence[InputSpec], entries: Sequence[Mapping[str, Any]]
) -> list[InputSpec]:
    """The inputs a JSON document gives, after checking its names against the model's:
    every required input in every sample, an optional one in every sample or in none, and
    no name the model does not have. InputError names what is missing and what is extra."""
    names = {s.name for s in specs}
    extra = sorted({name for entry in entries for name in entry} - names)
    missing = [s.name for s in specs if not s.optional and any(s.name not in e for e in entries)]
    if extra or missing:
        parts = ([f"no value for input(s) {', '.join(missing)}"] if missing else []) + (
            [f"names that are not inputs of the model: {', '.join(extra)}"] if extra else []
        )
        takes = ", ".join(f"{s.name}{' (optional)' if s.optional else ''}" for s in specs)
        raise InputError(f"input data has {'; '.join(parts)} (the model takes {takes})")
    used = []
    for spec in specs:
        given = [spec.name in entry for entry in entries]
        if any(given) and not all(given):
            first = given.index(False)
            raise InputError(
                f"input {spec.name} (optional) is missing from sample {first}: give it in "
                "every sample or in none"
            )
        if all(given):
            used.append(spec)
    return used


def max_batch_size(config: Mapping[str, Any]) -> int:
    config = config.get("config", config)
    return int(config.get("max_batch_size", 0) or 0)


def shape_elements(dims: Sequence[int], what: str) -> int:
    """The element count of one sample of shape `dims`, by arithmetic (math.prod on Python
    ints: no overflow, no allocation); InputError naming `what` when a dimension is
    negative or the count is over MAX_ELEMENTS."""
    if any(d < 0 for d in dims):
        raise InputError(f"{what}: shape {list(dims)} has a negative dimension")
    count = math.prod(dims)
    if count > MAX_ELEMENTS:
        raise InputError(
            f"{what}: shape {list(dims)} is {count:,} elements; at most {MAX_ELEMENTS:,} per sample"
        )
    return count


def _element_cost(datatype: str, data: object) -> int:
    """Bytes per element while building random or zero data (temporaries included:
    random BYTES draws STRING_LENGTH int64 indices per string, random BOOL int64s)."""
    if datatype == "BYTES":
        return STRING_LENGTH * 8 if data == "random" else 8
    if datatype == "BOOL":
        return 8 if data == "random" else 1
    return int(np.dtype(triton_to_np_dtype(datatype)).itemsize)


def _check_request_bytes(name: str, shape: Sequence[int], sample_bytes: int, batch: int) -> None:
    total = sample_bytes * batch
    if total > MAX_REQUEST_BYTES:
        times = f" x batch {batch}" if batch > 1 else ""
        raise InputError(
            f"input {name}: shape {list(shape)}{times} makes {total:,} bytes per request; "
            f"at most {MAX_REQUEST_BYTES:,}"
        )


def resolve_shape(spec: InputSpec, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
    """The concrete shape of one sample of `spec`; variable dims must come from `shapes`."""
    given = shapes.get(spec.name)
    if given is not None:
        dims = tuple(int(d) for d in given)
        shape_elements(dims, f"input {spec.name}")
        if len(dims) != len(spec.dims) or any(
            want not in (-1, got) for want, got in zip(spec.dims, dims, strict=True)
        ):
            raise InputError(
                f"input {spec.name}: shape {list(dims)} does not match the model's {list(spec.dims)}"
            )
        return dims
    if any(d < 0 for d in spec.dims):
        raise InputError(
            f"input {spec.name} has a variable dimension {list(spec.dims)}: give its shape "
            f"(e.g. {spec.name}:{','.join('16' if d < 0 else str(d) for d in spec.dims)})"
        )
    return spec.dims


def _random_sample(spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """perf_analyzer's random data, seeded: random bytes taken as the input's type (so floats
    include NaN, inf and denormals, and integers span the type's range) and BYTES elements
    of STRING_LENGTH random characters. The values matter: a float model computes on them
    as it does under perf_analyzer (the numpy MLP of the GPU check ran about 1.4x slower on
    them than on values in [0, 1), which made the engine look 1.4x faster than
    perf_analyzer). Index-like inputs need zeros or JSON data, as with perf_analyzer."""
    count = int(np.prod(shape))
    if spec.datatype == "BYTES":
        chars = rng.integers(0, len(STRING_CHARS), size=(count, STRING_LENGTH))
        flat = ["".join(STRING_CHARS[c] for c in row).encode() for row in chars]
        return np.array(flat, dtype=np.object_).reshape(shape)
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    dtype = np.dtype(triton_to_np_dtype(spec.datatype))
    raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def _zero_sample(spec: InputSpec, shape: tuple[int, ...]) -> np.ndarray:
    if spec.datatype == "BYTES":
        return np.full(shape, b"0", dtype=np.object_)
    return np.zeros(shape, dtype=np.dtype(triton_to_np_dtype(spec.datatype)))


def _json_shape(value: Any, where: str) -> tuple[int, ...]:
    """An entry's "shape", counted (shape_elements) before anything is built from it."""
    try:
        if not isinstance(value, list):
            raise TypeError
        dims = tuple(int(d) for d in value)
    except (TypeError, ValueError):
        raise InputError(
            f"{where}: 'shape' must be a list of whole numbers, not {value!r:.60}"
        ) from None
    shape_elements(dims, where)
    return dims


def _scalars(value: Any) -> Any:
    """The leaves of nested lists, depth first, without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list | tuple):
            stack.extend(reversed(item))
        else:
            yield item


def _not_numbers(spec: InputSpec, value: Any, dtype: np.dtype, where: str) -> InputError:
    """Why `value` does not convert to the input's type: the first bad element, or the
    nesting that is not a regular array."""
    for item in _scalars(value):
        try:
            np.asarray(item, dtype=dtype)
        except (ValueError, TypeError, OverflowError):
            number = isinstance(item, int | float) and not isinstance(item, bool)
            why = "does not fit" if number else "is not a number for"
            return InputError(f"{where}: {item!r:.60} {why} {spec.datatype}")
    return InputError(f"{where}: 'content' is not a regular array (nested lists differ in length)")


def _json_sample(
    spec: InputSpec, value: Any, shapes: Mapping[str, Sequence[int]], index: int = 0
) -> np.ndarray:
    """One sample of one input from the document; InputError names both ("input INPUT0,
    sample 3: ...") for values that are not numbers, bad base64 or a size that does not
    fit, instead of numpy's bare ValueError."""
    where = f"input {spec.name}, sample {index}"
    shape: Sequence[int] | None = None
    dtype = None if spec.datatype == "BYTES" else np.dtype(triton_to_np_dtype(spec.datatype))
    if isinstance(value, Mapping):
        if "shape" in value:
            shape = _json_shape(value["shape"], where)
        if "b64" in value:
            encoded = value["b64"]
            if not isinstance(encoded, str):
                raise InputError(f"{where}: 'b64' must be a base64 string")
            try:
                raw = base64.b64decode(encoded)
            except (binascii.Error, ValueError) as exc:
                raise InputError(f"{where}: 'b64' is not valid base64 ({exc})") from None
            if dtype is None:
                return np.array([raw], dtype=np.object_)
            if len(raw) % dtype.itemsize:
                raise InputError(
                    f"{where}: 'b64' holds {len(raw)} bytes, not a whole number of "
                    f"{spec.datatype} values ({dtype.itemsize} bytes each)"
                )
            arr = np.frombuffer(raw, dtype=dtype)
            shape = shape if shape is not None else resolve_shape(spec, shapes)
            return _shaped(arr, shape, f"{where}: 'b64' holds {arr.size} {spec.datatype} values")
        if "content" not in value:
            raise InputError(f"{where}: an entry needs 'content' or 'b64'")
        value = value["content"]
    if shape is None:
        shape = resolve_shape(spec, shapes)
    if dtype is None:  # BYTES: strings (perf_analyzer's format), UTF-8 encoded
        flat = []
        for item in _scalars(value):
            if not isinstance(item, str):
                raise InputError(f"{where}: {item!r:.60} is not a string for BYTES")
            flat.append(item.encode())
        arr = np.array(flat, dtype=np.object_)
    else:
        try:
            arr = np.asarray(value, dtype=dtype).ravel()
        except (ValueError, TypeError, OverflowError):
            raise _not_numbers(spec, value, dtype, where) from None
    return _shaped(
        arr, shape, f"input {spec.name}: {arr.size} values given", after=f", sample {index}"
    )


def _shaped(arr: np.ndarray, shape: Sequence[int], given: str, after: str = "") -> np.ndarray:
    """`arr` in `shape`; InputError ("<given> for shape [..] (N)<after>") when the counts
    differ."""
    expected = math.prod(shape)
    if arr.size != expected:
        raise InputError(f"{given} for shape {list(shape)} ({expected}){after}")
    return arr.reshape(shape)


def load_input_data(source: str | Path | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The list of samples from a perf_analyzer `--input-data` JSON (file, text or dict)."""
    if isinstance(source, Mapping):
        document: Any = source
    else:
        text = str(source)
        try:
            document = parse_input_json(
                text if text.lstrip().startswith("{") else Path(text).read_text()
            )
        except OSError as exc:
            raise InputError(f"input data file {text}: {exc.strerror or exc}") from None
    samples = document.get("data") if isinstance(document, Mapping) else None
    if not isinstance(samples, list) or not samples:
        raise InputError(
            'input data must be {"data": [{"INPUT": [...]}, ...]} with one entry or more'
        )
    for sample in samples:
        if not isinstance(sample, Mapping):
            raise InputError("each entry of 'data' must map input names to values")
    return [dict(s) for s in samples]


def parse_input_json(text: str) -> Any:
    """JSON text of an input-data document; InputError names the line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"input data is not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise InputError("input data is nested too deeply to be an input-data document") from None


def build_payloads(
    specs: Sequence[InputSpec],
    *,
    batch_size: int = 1,
    batching: bool = True,
    shapes: Mapping[str, Sequence[int]] | None = None,
    data: str | Path | Mapping[str, Any] = "random",
    seed: int = 0,
) -> list[list[TensorData]]:
    """The distinct requests of a sweep: each a list of tensors, batched when the model is.

    `data` is "random", "zeros", or perf_analyzer input-data JSON (path, text or dict).
    Raises InputError naming the input when a shape is missing or data does not fit.
    """
    shapes = shapes or {}
    unknown = set(shapes) - {s.name for s in specs}
    if unknown:
        raise InputError(f"shape given for unknown input(s): {', '.join(sorted(unknown))}")
    if not batching and batch_size != 1:
        raise InputError(
            f"the model does not batch (max_batch_size 0); batch size {batch_size} given"
        )
    resolved = (
        {s.name: resolve_shape(s, shapes) for s in specs} if data in ("random", "zeros") else {}
    )
    per_request = batch_size if batching else 1  # samples stacked into one request

    if data in ("random", "zeros"):
        for spec in specs:  # counted before anything is drawn: 10^12 elements never allocate
            shape = resolved[spec.name]
            cost = math.prod(shape) * _element_cost(spec.datatype, data)
            _check_request_bytes(spec.name, shape, cost, per_request)
        rng = np.random.default_rng(seed)
        sample = {
            s.name: (
                _random_sample(s, resolved[s.name], rng)
                if data == "random"
                else _zero_sample(s, resolved[s.name])
            )
            for s in specs
        }
        samples = [sample]
    else:
        entries = load_input_data(data)
        specs = _json_inputs(specs, entries)
        samples = []
        for entry in entries:
            index = len(samples)
            samples.append({s.name: _json_sample(s, entry[s.name], shapes, index) for s in specs})
        for spec in specs:
            largest = max(samples, key=lambda sample: sample[spec.name].nbytes)[spec.name]
            _check_request_bytes(spec.name, largest.shape, largest.nbytes, per_request)

    payloads: list[list[TensorData]] = []
    count = min(len(samples), MAX_PAYLOADS)
    for start in range(count):
        tensors = []
        for spec in specs:
            if batching:
                rows = [samples[(start + k) % len(samples)][spec.name] for k in range(batch_size)]
                if len({r.shape for r in rows}) > 1:
                    raise InputError(f"input {spec.name}: samples in one batch differ in shape")
                array = np.stack(rows)
            else:
                array = samples[start][spec.name]
            tensors.append(TensorData(spec.name, spec.datatype, array))
        payloads.append(tensors)
    return payloads
