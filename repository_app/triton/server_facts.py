"""What the attached Triton is (its version) and has (its GPUs), for the validator's
server-level rules.

The version comes from the server metadata (``"version": "2.51.0"``); the GPUs from the
metrics (see `gpus`): a server that answers its metrics endpoint without GPU series has no
usable GPU. Read at most every 30 s.
"""

from __future__ import annotations

import threading
import time

from ..modelconfig import ServerFacts
from ..modelconfig.context import TritonVersion
from ..modelconfig.versions import parse_triton_version
from . import gpus
from .client import TritonClient, TritonError, get_client

_TTL_S = 30.0
_cache: dict[str, tuple[float, ServerFacts | None]] = {}
_lock = threading.Lock()


def server_facts() -> ServerFacts | None:
    """The server's version and GPU ids (0..n-1); None when Triton answers neither.

    When only the metadata answers, the facts carry the version with ``gpus_known`` False.
    """
    client = get_client()
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
