"""What the attached Triton has (its GPUs), for the validator's server-level rules.

Triton exports one `nv_gpu_*` series per GPU it can use; a server that answers its
metrics endpoint without any has no usable GPU. Read at most every 30 s.
"""

from __future__ import annotations

import threading
import time

from .metrics import by_name
from .modelconfig import ServerFacts
from .triton_client import TritonError, get_client

_TTL_S = 30.0
_cache: dict[str, tuple[float, ServerFacts | None]] = {}
_lock = threading.Lock()


def server_facts() -> ServerFacts | None:
    """The server's GPU ids (0..n-1), or None when Triton's metrics do not answer."""
    client = get_client()
    now = time.monotonic()
    with _lock:
        cached = _cache.get(client.metrics_url)
        if cached and now - cached[0] < _TTL_S:
            return cached[1]
    try:
        samples = client.metrics()
    except TritonError:
        facts = None
    else:
        gpus = {s.labels.get("gpu_uuid") for s in by_name(samples, "nv_gpu_utilization")}
        facts = ServerFacts(gpu_ids=list(range(len(gpus - {None}))))
    with _lock:
        _cache[client.metrics_url] = (now, facts)
    return facts
