"""A tried request, to copy: ``curl`` against Triton's HTTP API, a Python ``tritonclient``
snippet, and perf_analyzer's ``--input-data`` JSON (which the Benchmark form takes as
it is). The server's key is never written out: the snippets read it from the
environment (``$TRITON_API_KEY``) when the server has one."""

from __future__ import annotations

import json
import shlex
from typing import Any

import numpy as np

from registry.servers import Server

from .tensors import Filled

COPY_LIMIT = 4096  # values per input; a larger request is not offered as text


def _data(array: np.ndarray) -> list[Any]:
    flat = array.reshape(-1)
    if array.dtype == object:
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat]
    return [bool(v) for v in flat] if array.dtype == np.bool_ else flat.tolist()


def too_large(inputs: tuple[Filled, ...]) -> str:
    """Why the request is not offered as text ("" when it is)."""
    big = [f"{f.name} ({f.array.size:,} values)" for f in inputs if f.array.size > COPY_LIMIT]
    return f"too large to copy as text: {', '.join(big)}" if big else ""


def request_json(inputs: tuple[Filled, ...], outputs: tuple[str, ...]) -> dict[str, Any]:
    """The request in Triton's HTTP/JSON shape (KServe v2)."""
    body: dict[str, Any] = {
        "inputs": [
            {"name": f.name, "shape": list(f.array.shape), "datatype": f.datatype,
             "data": _data(f.array)}
            for f in inputs
        ]
    }  # fmt: skip
    if outputs:
        body["outputs"] = [{"name": o} for o in outputs]
    return body


def curl(server: Server, model: str, inputs: tuple[Filled, ...], outputs: tuple[str, ...]) -> str:
    url = f"http://{server.http_url}/v2/models/{model}/infer"
    lines = [f"curl -sS -X POST {shlex.quote(url)}", "-H 'Content-Type: application/json'"]
    if server.api_key:
        lines.append(f'-H "{server.api_key_header}: $TRITON_API_KEY"')
    lines.append(f"-d {shlex.quote(json.dumps(request_json(inputs, outputs)))}")
    return " \\\n  ".join(lines)


def python(server: Server, model: str, inputs: tuple[Filled, ...], outputs: tuple[str, ...]) -> str:
    lines = [
        "import numpy as np",
        "import tritonclient.grpc as grpcclient",
        "",
        f"client = grpcclient.InferenceServerClient({server.grpc_url!r})",
        "inputs = []",
    ]
    for f in inputs:
        dtype = "np.object_" if f.array.dtype == object else f"np.{f.array.dtype.name}"
        data = _data(f.array)
        if f.array.dtype == object:
            literal = f"np.array({[d.encode() for d in data]!r}, dtype={dtype})"
        else:
            literal = f"np.array({data!r}, dtype={dtype})"
        lines += [
            f"tensor = grpcclient.InferInput({f.name!r}, {list(f.array.shape)!r}, {f.datatype!r})",
            f"tensor.set_data_from_numpy({literal}.reshape({list(f.array.shape)!r}))",
            "inputs.append(tensor)",
        ]
    wanted = ", ".join(f"grpcclient.InferRequestedOutput({o!r})" for o in outputs)
    headers = (
        f", headers={{{server.api_key_header!r}: os.environ['TRITON_API_KEY']}}"
        if server.api_key else ""
    )  # fmt: skip
    if headers:
        lines.insert(0, "import os")
    lines += [
        f"result = client.infer({model!r}, inputs"
        + (f", outputs=[{wanted}]" if outputs else "")
        + f"{headers})",
        "print(result.get_response())",
    ]
    return "\n".join(lines) + "\n"


def perf_analyzer_input(inputs: tuple[Filled, ...], batch: int | None) -> dict[str, Any]:
    """perf_analyzer's ``--input-data`` document: one request's tensors, without the batch
    dimension (perf_analyzer adds it from ``-b``): the first item of the batch."""
    entry = {}
    for f in inputs:
        array = f.array[0] if batch else f.array
        entry[f.name] = {"content": _data(array), "shape": list(array.shape)}
    return {"data": [entry]}
