"""How a client reaches one Triton: its address, its restricted-API key, the timeout.

Every client is built from a server's entry (an `Endpoint`, e.g. ``registry.servers.
Server``) through `server_connection`, which is given the timeout: the sync client, the load
engine's control client (`aio.AioClient`) and the engine's own inference transports
(profiler_app/engine), which put the key in the headers they build once per connection,
never per request. One function, `key_headers`, knows how each protocol carries the key.
The dashboard's settings are read by its glue (``registry.triton_clients``), never here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Endpoint(Protocol):
    """Where a Triton server answers and how to call it (``registry.servers.Server``)."""

    @property
    def name(self) -> str: ...
    @property
    def grpc_url(self) -> str: ...
    @property
    def http_url(self) -> str: ...
    @property
    def metrics_url(self) -> str: ...
    @property
    def api_key(self) -> str: ...
    @property
    def api_key_header(self) -> str: ...
    @property
    def from_env(self) -> bool: ...


def key_headers(protocol: str, api_key: tuple[str, str] | None) -> dict[str, str]:
    """The header that carries ``api_key`` (KEY, VALUE): Triton's
    --grpc-restricted-protocol=<protocols>:<KEY>=<VALUE> reads the gRPC metadata
    ``triton-grpc-protocol-<KEY>``, --http-restricted-api=<apis>:<KEY>=<VALUE> the HTTP
    header ``<KEY>``. None without a key."""
    if not api_key:
        return {}
    name, value = api_key
    return {f"triton-grpc-protocol-{name}" if protocol == "grpc" else name: value}


@dataclass(frozen=True)
class Connection:
    """One protocol's endpoint of one server, with what every call to it sends."""

    url: str  # host:port of the protocol's endpoint
    protocol: str = "grpc"  # "grpc" | "http"
    api_key: tuple[str, str] | None = None  # (KEY, VALUE) of Triton's restricted-API flags
    timeout_s: float | None = None  # a control call's (TRITON_TIMEOUT_S); None: the client's
    key_hint: str = ""  # where a refused call's key is set ("": the environment)

    @property
    def headers(self) -> dict[str, str]:
        return key_headers(self.protocol, self.api_key)


def server_connection(server: Endpoint, protocol: str, timeout_s: float | None) -> Connection:
    """``server``'s ``protocol`` endpoint with its key and ``timeout_s``: where a sweep's load
    goes, the load engine's own transports and perf_analyzer connecting there and
    `aio.AioClient` checking it."""
    return Connection(
        server.http_url if protocol == "http" else server.grpc_url,
        protocol,
        (server.api_key_header, server.api_key) if server.api_key else None,
        timeout_s,
        # Where a refused restricted call is fixed: the environment, or the server's own key.
        "" if server.from_env else f"the key of the server '{server.name}'",
    )


def as_connection(target: Connection | str, protocol: str) -> Connection:
    """``target`` itself, or a bare host:port (a test's own Triton) as a connection with no
    key and the clients' own timeouts."""
    return target if isinstance(target, Connection) else Connection(target, protocol)
