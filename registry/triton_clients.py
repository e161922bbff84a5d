"""The dashboard's Triton clients: the `triton_api` package, given the dashboard's settings.

`triton_api` reads no settings and imports no Django; this is where its parameters come
from. TRITON_TIMEOUT_S and TRITON_LOAD_TIMEOUT_S are read at call time (tests change
them), one sync client is kept per server address, key and timeouts for the life of the
process (shared by its threads), and its answers are remembered for one reading request
(``common.request_memo``).
"""

from __future__ import annotations

import threading

from django.conf import settings

from common.request_memo import remembered
from triton_api.client import TritonClient
from triton_api.connection import Connection, Endpoint, server_connection

_ClientKey = tuple[str, str, float, float, tuple[str, str] | None, str]
_clients: dict[_ClientKey, TritonClient] = {}
_clients_lock = threading.Lock()


def connection(server: Endpoint, protocol: str = "grpc") -> Connection:
    """``server``'s ``protocol`` endpoint with its key and TRITON_TIMEOUT_S: what every
    client of it, the load engine's included, is built from."""
    return server_connection(server, protocol, float(settings.TRITON_TIMEOUT_S))


def get_client(server: Endpoint) -> TritonClient:
    """The client of ``server`` (one per address, key and timeouts, shared by threads)."""
    grpc = connection(server, "grpc")
    key: _ClientKey = (
        grpc.url,
        server.metrics_url,
        float(settings.TRITON_TIMEOUT_S),
        float(settings.TRITON_LOAD_TIMEOUT_S),
        grpc.api_key,
        grpc.key_hint,
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = TritonClient(*key[:5], key_hint=grpc.key_hint, memo=remembered)
        return client
