"""The one place the load engine opens its inference transports to Triton.

A worker process (`load_workers.Worker`) makes one `Transports` from its spec: the
protocol's host:port, the request timeout, and the server's key as
`triton_api.connection.key_headers` built it. Every connection its slots use comes from
it, so the key, the timeout and the channel options are set here once:

- blocking, for a thread: gRPC on a grpc_h2 connection of the thread's own
  (`lean_sender`) or on the worker's shared grpcio channel (`grpc_channel`, `grpc_sender`),
  HTTP on an http.client connection of its own (`http_sender`);
- on the event loop: the gRPC aio channel and its unary call (`aio_channel`, `unary`) or the
  aiohttp session (`session`), and their senders (`aio_grpc_sender`, `aio_http_sender`);
- gRPC bidirectional streams for decoupled models (`streams`).

A sender's `send(request)` returns None, or why the request failed: the error texts a
window keeps are written here, for the stateless and the sequence slots alike. The key
is bound once per connection, never per request: into grpcio's unary call, every
stream's metadata and grpc_h2's prebuilt header block; over HTTP it rides in each
request's headers, prebuilt once (`worker_requests.serialize_http`,
`sequences.http_sequence_requests`). What is sent when stays with the callers.

grpc and aiohttp load on first use: a worker imports only its protocol's client.
"""

from __future__ import annotations

import functools
import http.client
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import hpack

from triton_api.address import split_host_port

from . import grpc_h2
from .worker_requests import GRPC_METHOD, http_path

if TYPE_CHECKING:
    from .worker_requests import WorkerSpec

STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
CONNECT_PAUSE_S = 0.05  # after a refused connection: Triton is gone, do not spin

AioSend = Callable[[Any], Awaitable["str | None"]]  # a request -> None, or why it failed


def http_error(status: int, body: bytes) -> str:
    """A refused HTTP request's error: Triton's JSON "error", or the status and body."""
    try:
        return str(json.loads(body).get("error", body[:200]))
    except (ValueError, AttributeError):
        return f"HTTP {status}: {body[:200]!r}"


def unary_call(channel: Any, method: str, headers: Sequence[tuple[str, str]]) -> Any:
    """A unary gRPC call of raw bytes on a grpcio channel (sync or aio), with the server's key
    bound to it here once: a request adds no work."""
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    return functools.partial(call, metadata=tuple(headers)) if headers else call


class LeanSender:
    """gRPC calls one at a time on a grpc_h2 connection of the calling thread's own
    (perf_analyzer's model), opened on first use and again after it failed."""

    def __init__(self, opener: Callable[[], grpc_h2.UnaryConnection], url: str) -> None:
        self.opener, self.url = opener, url
        self.conn: grpc_h2.UnaryConnection | None = None

    def connect(self) -> str | None:
        """None once connected, else why not (the caller pauses CONNECT_PAUSE_S)."""
        if self.conn is None:
            try:
                self.conn = self.opener()
            except OSError as exc:
                return f"cannot connect to {self.url}: {exc}"
        return None

    def send(self, raw: bytes) -> str | None:
        if self.conn is None and (why := self.connect()) is not None:
            time.sleep(CONNECT_PAUSE_S)
            return why
        assert self.conn is not None
        try:
            self.conn.call(raw)
        except grpc_h2.GrpcCallError as exc:
            return str(exc)
        except (OSError, hpack.HPACKError) as exc:  # gone: the next request opens another
            self.close()
            return f"{type(exc).__name__}: {exc}"
        return None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class GrpcSender:
    """Blocking gRPC calls through grpcio, on a channel the worker's threads share."""

    def __init__(self, call: Any, timeout_s: float) -> None:
        import grpc

        self.call, self.timeout_s, self.error = call, timeout_s, grpc.RpcError

    def connect(self) -> str | None:
        return None  # grpcio connects (and reconnects) by itself

    def send(self, raw: bytes) -> str | None:
        try:
            self.call(raw, timeout=self.timeout_s)
        except self.error as exc:
            return exc.details() or str(exc.code())
        return None

    def close(self) -> None:
        pass  # the channel is the worker's


class HttpSender:
    """Blocking HTTP requests, one at a time, on an http.client connection of the calling
    thread's own (reopened by http.client after a failure)."""

    def __init__(self, conn: http.client.HTTPConnection, path: str) -> None:
        self.conn, self.path = conn, path

    def connect(self) -> str | None:
        return None  # http.client connects on the first request

    def send(self, request: tuple[bytes, dict[str, str]]) -> str | None:
        body, headers = request
        conn = self.conn
        try:
            conn.request("POST", self.path, body=body, headers=headers)
            response = conn.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            return f"{type(exc).__name__}: {exc}"
        return None if response.status == 200 else http_error(response.status, content)

    def close(self) -> None:
        self.conn.close()


Sender = LeanSender | GrpcSender | HttpSender


class Streams:
    """ModelStreamInfer streams on one gRPC aio channel; each opens with the server's key."""

    def __init__(self, url: str, headers: Sequence[tuple[str, str]]) -> None:
        import grpc

        self.url = url
        self.metadata = tuple(headers) or None
        self.channel = grpc.aio.insecure_channel(url, options=GRPC_OPTIONS)
        self.method = self.channel.stream_stream(
            STREAM_METHOD, request_serializer=None, response_deserializer=None
        )

    def open(self) -> Any:
        """A new stream (a grpc.aio StreamStreamCall of raw bytes)."""
        return self.method(metadata=self.metadata)

    async def close(self) -> None:
        await self.channel.close()


class Transports:
    """Opens the connections of one worker process to its Triton (see the module)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.url, self.protocol, self.timeout_s = spec.url, spec.protocol, spec.timeout_s
        self.headers = spec.headers  # the server's key (`connection.key_headers`), or ()
        self.path = http_path(spec)

    # --- blocking: a thread's own connection, or the worker's shared grpcio channel --------

    def h2(self) -> grpc_h2.UnaryConnection:
        """A grpc_h2 connection, connected now (OSError when it cannot be)."""
        return grpc_h2.UnaryConnection(self.url, GRPC_METHOD, self.timeout_s, self.headers)

    def lean_sender(self) -> LeanSender:
        return LeanSender(self.h2, self.url)

    def grpc_channel(self) -> Any:
        """A blocking grpcio channel (a worker's threads share one)."""
        import grpc

        return grpc.insecure_channel(self.url, options=GRPC_OPTIONS)

    def unary(self, channel: Any) -> Any:
        """ModelInfer on ``channel`` (blocking or aio), the key bound to it."""
        return unary_call(channel, GRPC_METHOD, self.headers)

    def grpc_sender(self, channel: Any) -> GrpcSender:
        return GrpcSender(self.unary(channel), self.timeout_s)

    def http_sender(self) -> HttpSender:
        conn = http.client.HTTPConnection(*split_host_port(self.url), timeout=self.timeout_s)
        return HttpSender(conn, self.path)

    # --- on the event loop ---------------------------------------------------------------------

    def aio_channel(self) -> Any:
        import grpc

        return grpc.aio.insecure_channel(self.url, options=GRPC_OPTIONS)

    def session(self) -> Any:
        """An aiohttp session with no connection limit and the request timeout."""
        import aiohttp

        return aiohttp.ClientSession(
            f"http://{self.url}",
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
        )

    def aio_grpc_sender(self, call: Any) -> AioSend:
        """Requests through ``call`` (`unary` on the aio channel)."""
        import grpc

        timeout_s, error = self.timeout_s, grpc.aio.AioRpcError

        async def send(raw: bytes) -> str | None:
            try:
                await call(raw, timeout=timeout_s)
            except error as exc:
                return exc.details() or str(exc.code())
            return None

        return send

    def aio_http_sender(self, session: Any) -> AioSend:
        """Requests through ``session`` (`session`)."""
        path = self.path

        async def send(request: tuple[bytes, dict[str, str]]) -> str | None:
            body, headers = request
            try:
                async with session.post(path, data=body, headers=headers) as response:
                    content = await response.read()
                    status = response.status
            except Exception as exc:  # noqa: BLE001 - any transport failure is an error
                return f"{type(exc).__name__}: {exc}"
            return None if status == 200 else http_error(status, content)

        return send

    # --- decoupled models ------------------------------------------------------------------------

    def streams(self) -> Streams:
        """The aio channel of a worker's streams (on its event loop)."""
        return Streams(self.url, self.headers)
