"""Try a model: one request from the Try form (or the API) to one server, its outputs,
the round trip and what Triton's statistics counted for it.

Everything the user gave is checked first (``tensors``: the input named on each
refusal); then the request goes out on a channel whose limits are the settings'
(``TRY_MAX_REQUEST_BYTES``, ``TRY_MAX_RESPONSE_BYTES``), so an answer larger than the limit
is refused as it arrives, never held whole. Triton's own error text is passed on as it is.
Outputs are kept for an hour (``results``) so the page can offer each whole, as ``.npy``
and JSON, while it shows only the first values.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.conf import settings

from registry.servers import Server
from registry.triton_clients import get_client
from repository_app import events
from triton_api.client import Inferred, TritonError

from . import results, snippets
from .model_io import ModelIO, describe
from .tensors import BadInput, Filled, fill

SHOWN_VALUES = 64  # per output on the page; the rest is in the downloads
# A request (and an answer) of more values than this is not kept as a check.
CHECK_MAX_VALUES = 262_144
MAX_STEPS = 64  # requests in one tried sequence
COUNTED_WITHIN_S = 2.0  # how long the statistics may lag the answer
STREAM_ID = re.compile(r"[A-Za-z0-9-]{1,64}")
# Triton's cumulative durations per model, the parts of one request (statistics extension).
_PARTS = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class TryRequest:
    """What one Try sends: the inputs filled, the outputs wanted (all when empty), and for
    sequence models the correlation id and the START/END flags."""

    inputs: tuple[Filled, ...]
    outputs: tuple[str, ...] = ()
    batch: int | None = None
    sequence: tuple[int, bool, bool] | None = None
    steps: int = 1  # a sequence of this many requests, the same inputs each time
    stream: str = ""  # names a decoupled request's live responses for the page


@dataclass
class Tried:
    model: str
    version: str
    latency_ms: float
    outputs: list[dict[str, Any]]
    statistics: list[dict[str, Any]]
    token: str
    request: TryRequest = field(repr=False)
    responses: list[dict[str, Any]] | None = None  # a decoupled model's, each as it came

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "latency_ms": round(self.latency_ms, 3),
            "outputs": self.outputs,
            "statistics": self.statistics,
            "result": self.token,
            "responses": self.responses,
        }


def model_io(server: Server, name: str) -> ModelIO:
    """The model as Triton serves it now (TritonError when it does not: not loaded)."""
    client = get_client(server)
    return describe(client.model_metadata(name), client.model_config(name))


def parse(io: ModelIO, body: Mapping[str, Any]) -> TryRequest:
    """The API's (and the page's) JSON body as a request, refused with the field at fault:
    ``{"inputs": {"INPUT0": {"mode": "values", "values": "1 2 3", "dims": ""}}, "batch": 1,
    "outputs": ["OUTPUT0"], "sequence": {"correlation_id": 7, "start": true, "end": true}}``."""
    given = body.get("inputs")
    if not isinstance(given, dict):
        raise BadInput("inputs", 'inputs is an object: {"INPUT0": {"mode": ..., "values": ...}}')
    unknown = sorted(set(given) - {i.name for i in io.inputs})
    if unknown:
        raise BadInput(f"inputs.{unknown[0]}", f"{io.name} has no input {unknown[0]!r}")
    batch = _batch(io, body.get("batch"))
    filled = []
    for spec in io.inputs:
        entry = given.get(spec.name)
        if entry is None or (isinstance(entry, dict) and entry.get("mode") == "omit"):
            if spec.optional:
                continue
            raise BadInput(f"inputs.{spec.name}", f"{spec.name}: the model needs this input")
        if not isinstance(entry, dict):
            raise BadInput(f"inputs.{spec.name}", f"{spec.name}: an object with mode and values")
        filled.append(
            fill(
                spec,
                str(entry.get("mode", "values")),
                values=str(entry.get("values", "")),
                dims=str(entry.get("dims", "")),
                batch=batch,
            )
        )
    _within_limit(filled)
    outputs = body.get("outputs") or []
    names = {o.name for o in io.outputs}
    if not isinstance(outputs, list) or any(o not in names for o in outputs):
        raise BadInput("outputs", f"outputs are some of {', '.join(sorted(names))}")
    stream = str(body.get("stream") or "")
    if stream and not STREAM_ID.fullmatch(stream):
        raise BadInput("stream", "a stream id is 1 to 64 letters, digits and '-'")
    sequence = _sequence(io, body.get("sequence"))
    return TryRequest(
        tuple(filled), tuple(outputs), batch, sequence, _steps(io, body.get("sequence")), stream
    )


def _batch(io: ModelIO, value: Any) -> int | None:
    if not io.batches:
        return None
    try:
        batch = int(value if value not in (None, "") else 1)
    except (TypeError, ValueError):
        raise BadInput("batch", "the batch size is a whole number") from None
    if not 1 <= batch <= io.max_batch_size:
        raise BadInput("batch", f"the batch size is 1 to {io.max_batch_size} (max_batch_size)")
    return batch


def _sequence(io: ModelIO, value: Any) -> tuple[int, bool, bool] | None:
    if not io.sequence:
        return None
    value = value if isinstance(value, dict) else {}
    try:
        correlation = int(value.get("correlation_id") or 1)
    except (TypeError, ValueError):
        raise BadInput("sequence.correlation_id", "the correlation id is a whole number") from None
    if not 1 <= correlation < 2**64:
        raise BadInput("sequence.correlation_id", "the correlation id is 1 to 2^64 - 1")
    return correlation, bool(value.get("start", True)), bool(value.get("end", True))


def _steps(io: ModelIO, value: Any) -> int:
    """How many requests the sequence sends (START on the first, END on the last)."""
    if not io.sequence or not isinstance(value, dict) or value.get("steps") in (None, ""):
        return 1
    try:
        steps = int(value["steps"])
    except (TypeError, ValueError):
        raise BadInput("sequence.steps", "the number of steps is a whole number") from None
    if not 1 <= steps <= MAX_STEPS:
        raise BadInput("sequence.steps", f"a sequence is 1 to {MAX_STEPS} steps")
    return steps


def _within_limit(filled: list[Filled]) -> None:
    size = sum(_nbytes(f.array) for f in filled)
    if size > settings.TRY_MAX_REQUEST_BYTES:
        raise BadInput(
            "inputs",
            f"the inputs take {size:,} bytes, above the limit of "
            f"{settings.TRY_MAX_REQUEST_BYTES:,} (TRY_MAX_REQUEST_BYTES)",
        )


def _nbytes(array: np.ndarray) -> int:
    if array.dtype == object:
        return sum(len(v) + 4 for v in array.reshape(-1))
    return int(array.nbytes)


def _counters(stats: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per model: the request count and each part's cumulative ns, over its versions."""
    out: dict[str, dict[str, int]] = {}
    for row in stats:
        totals = out.setdefault(
            str(row.get("name", "")), {"requests": 0} | dict.fromkeys(_PARTS, 0)
        )
        inference = row.get("inference_stats") or {}
        totals["requests"] += int((inference.get("success") or {}).get("count", 0))
        for part in _PARTS:
            totals[part] += int((inference.get(part) or {}).get("ns", 0))
    return out


def _statistics(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
                order: list[str]) -> list[dict[str, Any]]:  # fmt: skip
    """What each model's counters moved by: this request's share, unless another request
    ran in the same moment (``requests`` above 1 says so)."""
    rows = []
    for model in order:
        now, was = after.get(model), before.get(model, {})
        if now is None:
            continue
        row: dict[str, Any] = {"model": model, "requests": now["requests"] - was.get("requests", 0)}
        for part in _PARTS:
            row[f"{part}_us"] = round((now[part] - was.get(part, 0)) / 1000, 1)
        rows.append(row)
    return rows


def _shown(name: str, datatype: str, array: np.ndarray) -> dict[str, Any]:
    flat = array.reshape(-1)
    head = flat[:SHOWN_VALUES]
    if datatype == "BYTES":
        values: list[Any] = [
            v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in head
        ]
    elif datatype == "BOOL":
        values = [bool(v) for v in head]
    else:
        values = (
            [v if math.isfinite(v) else str(v) for v in head.tolist()]
            if head.dtype.kind == "f"
            else head.tolist()
        )
    return {
        "name": name,
        "datatype": datatype,
        "shape": list(array.shape),
        "count": int(flat.size),
        "values": values,
        "truncated": int(flat.size) > SHOWN_VALUES,
    }


def _keepable(request: TryRequest) -> dict[str, Any] | None:
    """The request in Triton's JSON shape, to be kept as a check; None when too large."""
    if sum(f.array.size for f in request.inputs) > CHECK_MAX_VALUES or request.steps > 1:
        return None  # too large, or several requests (a check sends one)
    body = snippets.request_json(request.inputs, request.outputs)
    if request.sequence is not None:
        correlation, start, end = request.sequence
        body["sequence"] = {"correlation_id": correlation, "start": start, "end": end}
    return body


def _sent(io: ModelIO, request: TryRequest) -> tuple[str, list[tuple[str, str, Any]], list[str]]:
    """The model, the inputs and the outputs asked for, as the client sends them."""
    inputs = [(f.name, f.datatype, f.array) for f in request.inputs]
    return io.name, inputs, list(request.outputs or [o.name for o in io.outputs])


def _limits() -> dict[str, Any]:
    """Try's bounds on one request: its size, its answer's size and its time."""
    return {
        "max_request_bytes": settings.TRY_MAX_REQUEST_BYTES,
        "max_response_bytes": settings.TRY_MAX_RESPONSE_BYTES,
        "timeout_s": settings.TRY_TIMEOUT_S,
    }


def send(server: Server, io: ModelIO, request: TryRequest, user: Any) -> Tried:
    """Send ``request`` (checked by ``parse``) and read what came back."""
    client = get_client(server)
    watched = [io.name, *dict.fromkeys(io.ensemble_steps)]

    def counters() -> dict[str, dict[str, int]]:
        found: dict[str, dict[str, int]] = {}
        for model in watched:
            # A step that is not loaded has no counters: it is left out.
            with contextlib.suppress(TritonError):
                found |= _counters(client.model_statistics(model))
        return found

    before = counters()
    if io.decoupled:
        return _streamed(server, io, request, user, before, counters, watched)
    answers = []
    for step in range(request.steps):
        sequence = request.sequence
        if sequence is not None and request.steps > 1:  # the flags set for each step
            sequence = (sequence[0], step == 0, step == request.steps - 1)
        answers.append(client.infer(*_sent(io, request), sequence=sequence, **_limits()))
    answer = answers[-1]
    after = counted(io.name, before, len(answers), counters)
    token = results.keep(user, answer.outputs, answer.datatypes, _keepable(request))
    return Tried(
        model=io.name,
        version=answer.model_version,
        latency_ms=answer.elapsed_ns / 1e6,
        outputs=[_shown(n, answer.datatypes[n], a) for n, a in answer.outputs.items()],
        statistics=_statistics(before, after, watched),
        token=token,
        request=request,
        responses=_listed(answers) if request.steps > 1 else None,  # fmt: skip
    )


def counted(
    model: str,
    before: dict[str, dict[str, int]],
    sent: int,
    counters: Callable[[], dict[str, dict[str, int]]],
) -> dict[str, dict[str, int]]:
    """Triton's counters once they include the ``sent`` requests: Triton updates a model's
    statistics as it releases the request, which may come just after the answer. Read
    again until they do, at most COUNTED_WITHIN_S (then as they are)."""
    deadline = time.monotonic() + COUNTED_WITHIN_S
    wanted = before.get(model, {}).get("requests", 0) + sent
    while True:
        after = counters()
        if after.get(model, {}).get("requests", 0) >= wanted or time.monotonic() > deadline:
            return after
        time.sleep(0.01)


def _listed(answers: list[Inferred]) -> list[dict[str, Any]]:
    """Several answers (a sequence's steps, a stream's responses), each with its time."""
    return [
        {"index": i, "t_ms": round(a.elapsed_ns / 1e6, 3),
         "outputs": [_shown(n, a.datatypes[n], v) for n, v in a.outputs.items()]}
        for i, a in enumerate(answers)
    ]  # fmt: skip


def _streamed(
    server: Server,
    io: ModelIO,
    request: TryRequest,
    user: Any,
    before: dict[str, dict[str, int]],
    counters: Callable[[], dict[str, dict[str, int]]],
    watched: list[str],
) -> Tried:
    """A decoupled model's request over a stream: each response goes to the user's page as
    it arrives (``try.response`` on the user's group, named by ``request.stream``); the
    outputs kept are every response's, stacked (one row a response) where their shapes
    agree."""
    group = events.user_group(user.pk)

    def arrived(index: int, elapsed_ns: int, answer: Inferred) -> None:
        if request.stream:
            events.publish(group, "try.response", {
                "stream": request.stream, "index": index, "t_ms": round(elapsed_ns / 1e6, 3),
                "outputs": [_shown(n, answer.datatypes[n], a) for n, a in answer.outputs.items()],
            })  # fmt: skip

    got, elapsed = get_client(server).stream_infer(
        *_sent(io, request), on_response=arrived, **_limits()
    )
    after = counted(io.name, before, 1, counters)
    stacked: dict[str, np.ndarray] = {}
    datatypes: dict[str, str] = {}
    for answer in got:
        datatypes |= answer.datatypes
    for name in datatypes:
        parts = [a.outputs[name] for a in got if name in a.outputs]
        same = len({p.shape for p in parts}) == 1
        stacked[name] = np.stack(parts) if parts and same else parts[-1]
    token = results.keep(user, stacked, datatypes, None)  # a stream is not kept as a check
    return Tried(
        model=io.name,
        version=got[-1].model_version if got else "",
        latency_ms=elapsed / 1e6,
        outputs=[_shown(n, datatypes[n], a) for n, a in stacked.items()],
        statistics=_statistics(before, after, watched),
        token=token,
        request=request,
        responses=_listed(got),
    )
