"""What a load worker sends, and when: its spec (`WorkerSpec`, from the coordinator), its
requests serialised once up front (gRPC's ModelInferRequest bytes, or Triton's
binary-data HTTP bodies), and the send times of a request-rate level (`Schedule`).

Kept apart from the worker process (`load_workers`) so that the coordinator builds a
spec without importing the worker's transports (`transports`), and the sequence and
stream slots share the same serialisation.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .http_body import request_body
from .sequences import SequenceSpec

GRPC_METHOD = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class WorkerSpec:
    protocol: str  # "grpc" | "http"
    url: str  # host:port
    model: str
    version: str
    payloads: Sequence[Sequence[tuple[str, str, np.ndarray]]]  # (name, datatype, array)
    client: str  # "aio" | "threads"
    timeout_s: float = 30.0
    rate_threads: int = 1  # paced threads of this worker in request-rate mode with "threads"
    streaming: bool = False  # decoupled model: concurrency slots are gRPC streams
    stream_timeout_s: float = 30.0  # a streamed request without its final response fails
    sequence: SequenceSpec | None = None  # a sequence model: its requests go in sequences
    token_output: str = ""  # streaming: the output whose elements count tokens ("": responses)
    # The server's key (`connection.key_headers`): built into each connection or each
    # request's prebuilt headers once, never per request.
    headers: tuple[tuple[str, str], ...] = ()


def serialize_grpc(spec: WorkerSpec) -> list[bytes]:
    """ModelInferRequest bytes for each payload, built once."""
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import serialize_byte_tensor

    requests = []
    for payload in spec.payloads:
        request = service_pb2.ModelInferRequest(model_name=spec.model, model_version=spec.version)
        for name, datatype, array in payload:
            tensor = request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
            del tensor  # shape/type only; the data travels in raw_input_contents
            if datatype == "BYTES":
                request.raw_input_contents.append(serialize_byte_tensor(array).tobytes())
            else:
                request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
        requests.append(request.SerializeToString())
    return requests


def serialize_http(spec: WorkerSpec) -> list[tuple[bytes, dict[str, str]]]:
    """(body, headers) for each payload in Triton's binary-data HTTP format, built once."""
    bodies = []
    for payload in spec.payloads:
        body, json_size = request_body(payload)
        headers = {"Content-Type": "application/octet-stream", **dict(spec.headers)}
        if json_size is not None:
            headers["Inference-Header-Content-Length"] = str(json_size)
        bodies.append((body, headers))
    return bodies


def http_path(spec: WorkerSpec) -> str:
    version = f"/versions/{spec.version}" if spec.version else ""
    return f"/v2/models/{spec.model}{version}/infer"


class Schedule:
    """Send times of an open-loop arrival process (constant or Poisson), from
    `first_ns` on, handed out in turn to whichever thread asks next."""

    def __init__(self, rate: float, arrival: str, seed: int, first_ns: int) -> None:
        self.rate = rate
        self.poisson = arrival == "poisson"
        self.rng = random.Random(seed)
        self.next_at = first_ns
        self.lock = threading.Lock()

    def take(self) -> int:
        with self.lock:
            at = self.next_at
            gap = self.rng.expovariate(self.rate) if self.poisson else 1.0 / self.rate
            self.next_at += int(gap * 1e9)
            return at
