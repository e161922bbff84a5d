"""What a Triton server is (its version) and has (its GPUs): for the validator's
server-level rules (``server_facts``) and for what a sweep records of the server it ran on
(``describe``).

The version comes from the server metadata (``"version": "2.51.0"``); the GPUs from the
metrics (see `triton_api.gpus`): a server that answers its metrics endpoint without GPU
series has no usable GPU. Read at most every 30 s. It joins the Triton client to the
validator (``modelconfig.ServerFacts``), so it lives beside them, not in `triton_api`.
"""

from __future__ import annotations

import threading
import time

from registry.triton_clients import get_client
from triton_api import gpus
from triton_api.client import TritonClient, TritonError
from triton_api.connection import Endpoint

from .modelconfig import ServerFacts
from .modelconfig.context import TritonVersion
from .modelconfig.versions import parse_triton_version

_TTL_S = 30.0
_cache: dict[str, tuple[float, ServerFacts | None]] = {}
_lock = threading.Lock()


def server_facts(server: Endpoint) -> ServerFacts | None:
    """The server's version and GPU ids (0..n-1); None when Triton answers neither.

    When only the metadata answers, the facts carry the version with ``gpus_known`` False.
    """
    client = get_client(server)
    now = time.monotonic()
    with _lock:
        cached = _cache.get(client.metrics_url)
        if cached and now - cached[0] < _TTL_S:
            return cached[1]
    version: TritonVersion | None = None
    facts: ServerFacts | None = None
    try:
        version = _version(client)
        samples = client.metrics()
    except _Unreachable:
        pass
    except TritonError:
        if version is not None:
            facts = ServerFacts(gpus_known=False, version=version)
    else:
        facts = ServerFacts(gpu_ids=list(range(len(gpus.uuids(samples)))), version=version)
    with _lock:
        _cache[client.metrics_url] = (now, facts)
    return facts


class _Unreachable(Exception):
    """The server did not answer at all: skip the metrics call (and its timeout)."""


def _version(client: TritonClient) -> TritonVersion | None:
    try:
        meta = client.server_metadata()
    except TritonError as exc:
        if exc.unreachable:
            raise _Unreachable from exc
        return None
    try:
        return parse_triton_version(str(meta.get("version", "")))
    except ValueError:
        return None  # a build without a version string: judge against the newest release


def describe(server: Endpoint) -> dict[str, object]:
    """The server's facts as a sweep stores them when it starts, for later compares: its
    name and address, Triton's version, and its GPUs (count, uuids and memory; Triton's
    metrics name no GPU model). Whatever does not answer is left empty."""
    from django.utils import timezone

    client = get_client(server)
    try:
        version = str(client.server_metadata().get("version", ""))
    except TritonError:
        version = ""
    try:
        samples = client.metrics()
    except TritonError:
        samples = []
    uuids = gpus.uuids(samples)
    return {
        "server": server.name,
        "grpc_url": server.grpc_url,
        "triton_version": version,
        "gpu_count": len(uuids),
        "gpus": [
            {"uuid": uuid, "memory_total_bytes": gpus.memory_total_bytes(samples, uuid)}
            for uuid in uuids
        ],
        "gpu_metrics": bool(samples) and gpus.has_gpus(samples),
        "recorded_at": timezone.now().isoformat(),
    }
