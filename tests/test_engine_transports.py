"""The load engine's one transport factory (profiler_app/engine/transports.py): every kind of
connection a worker opens carries the server's key, and a refused or failed request comes
back as the error text a window keeps. Against a local gRPC peer (grpcio, raw bytes) and a
local HTTP peer that record what they were sent; the engine against a keyed Triton is
tests/test_triton_connection.py."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from profiler_app.engine.stream_slots import FINAL_FLAG, StreamSlots
from profiler_app.engine.transports import Transports
from profiler_app.engine.worker_records import Recorder
from profiler_app.engine.worker_requests import Schedule, WorkerSpec, serialize_grpc, serialize_http
from triton_api.address import join_host_port
from triton_api.connection import key_headers

KEY = ("dashboard-key", "s3cret")
GRPC_KEY = ("triton-grpc-protocol-dashboard-key", "s3cret")
PAYLOADS = [[("IN", "INT32", np.zeros((1, 2), dtype=np.int32))]]
REFUSED = b"refuse me"  # a request the peers answer with an error


def _spec(protocol: str, url: str, **fields: Any) -> WorkerSpec:
    headers = tuple(key_headers(protocol, KEY).items())
    fields = {"client": "threads", **fields}
    return WorkerSpec(protocol=protocol, url=url, model="m", version="", payloads=PAYLOADS,
                      timeout_s=10.0, headers=headers, **fields)  # fmt: skip


class GrpcPeer:
    """ModelInfer and ModelStreamInfer of raw bytes, recording each call's metadata."""

    def __init__(self) -> None:
        self.unary: list[dict[str, str]] = []
        self.streams: list[dict[str, str]] = []
        self.lock = threading.Lock()

    def infer(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        with self.lock:
            self.unary.append(dict(context.invocation_metadata()))
        if raw == REFUSED:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad input")
        return service_pb2.ModelInferResponse(model_name="m").SerializeToString()

    def stream(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        with self.lock:
            self.streams.append(dict(context.invocation_metadata()))
        for raw in requests:  # one response per request, with outputs and the final flag
            request = service_pb2.ModelInferRequest.FromString(raw)
            response = service_pb2.ModelInferResponse(id=request.id, model_name="m")
            response.outputs.add(name="OUT", datatype="INT32", shape=[1])
            response.parameters[FINAL_FLAG].bool_param = True
            yield service_pb2.ModelStreamInferResponse(infer_response=response).SerializeToString()


@pytest.fixture
def grpc_peer() -> Iterator[tuple[str, GrpcPeer]]:
    peer = GrpcPeer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(peer.infer),
        "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(peer.stream),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield join_host_port("127.0.0.1", port), peer
    server.stop(None)


class _HttpPeer(BaseHTTPRequestHandler):
    """Triton's infer endpoint: 200, or 400 with Triton's JSON error for REFUSED."""

    protocol_version = "HTTP/1.1"  # keep-alive, as Triton: a thread's connection is reused
    seen: list[tuple[str, dict[str, str]]]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        refused = body == REFUSED
        reply = json.dumps({"error": "bad input"} if refused else {}).encode()
        self.send_response(400 if refused else 200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_peer() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    seen: list[tuple[str, dict[str, str]]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_HttpPeer,), {"seen": seen}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield join_host_port("127.0.0.1", server.server_address[1]), seen
    server.shutdown()
    server.server_close()


def _closed_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return join_host_port("127.0.0.1", listener.getsockname()[1])


# --- gRPC ----------------------------------------------------------------------------------------


def test_every_blocking_grpc_sender_carries_the_key_and_names_a_refusal(grpc_peer):
    url, peer = grpc_peer
    transports = Transports(_spec("grpc", url))
    request = serialize_grpc(_spec("grpc", url))[0]
    channel = transports.grpc_channel()
    try:
        for sender in (transports.lean_sender(), transports.grpc_sender(channel)):
            try:
                assert sender.connect() is None
                assert [sender.send(request), sender.send(request)] == [None, None]
                assert sender.send(REFUSED) == "bad input"  # grpc-message, as grpcio reads it
                assert sender.send(request) is None  # the connection goes on after a refusal
            finally:
                sender.close()
    finally:
        channel.close()
    assert len(peer.unary) == 8
    assert all(m.get(GRPC_KEY[0]) == GRPC_KEY[1] for m in peer.unary), peer.unary


async def test_the_aio_grpc_sender_carries_the_key_and_names_a_refusal(grpc_peer):
    url, peer = grpc_peer
    transports = Transports(_spec("grpc", url, client="aio"))
    channel = transports.aio_channel()
    try:
        send = transports.aio_grpc_sender(transports.unary(channel))
        request = serialize_grpc(_spec("grpc", url))[0]
        assert await send(request) is None
        assert await send(REFUSED) == "bad input"
    finally:
        await channel.close()
    assert [m.get(GRPC_KEY[0]) for m in peer.unary] == [GRPC_KEY[1]] * 2


def test_an_unreachable_grpc_triton_is_an_error_text_not_an_exception():
    gone = _closed_port()
    sender = Transports(_spec("grpc", gone)).lean_sender()
    why = sender.connect()
    assert why is not None and why.startswith(f"cannot connect to {gone}: ")
    assert sender.send(b"") == why and sender.conn is None  # tried again, not sent
    sender.close()


async def test_every_stream_carries_the_key_at_a_concurrency_and_at_a_rate(grpc_peer):
    url, peer = grpc_peer
    spec = _spec("grpc", url, streaming=True)
    rec = Recorder(streaming=True)
    slots = StreamSlots(Transports(spec), serialize_grpc(spec), rec)
    try:
        info = await slots.open(timeout_s=10, stream_timeout_s=10)
        assert info == {"outputs": ["OUT"]}

        async def until(count: int, run: Any) -> None:
            task = asyncio.ensure_future(run(lambda: len(rec.records) < count))
            await asyncio.wait_for(task, 30)  # a bound, not a target

        await until(5, slots.slot)  # a stream per concurrency slot
        schedule = Schedule(500, "constant", 0, time.monotonic_ns())
        await until(10, lambda still: slots.rate(still, schedule, 2))  # one stream, many
    finally:
        await slots.close()
    assert len(rec.records) >= 10 and all(lat >= 0 for _, lat in rec.records)
    assert len(peer.streams) == 3  # the checked call's, the slot's and the rate's
    assert all(m.get(GRPC_KEY[0]) == GRPC_KEY[1] for m in peer.streams), peer.streams


# --- HTTP ----------------------------------------------------------------------------------------


def test_the_blocking_http_sender_sends_the_prebuilt_key_and_names_a_refusal(http_peer):
    url, seen = http_peer
    spec = _spec("http", url)
    sender = Transports(spec).http_sender()
    body, headers = serialize_http(spec)[0]
    try:
        assert sender.connect() is None
        assert sender.send((body, headers)) is None
        assert sender.send((REFUSED, headers)) == "bad input"  # Triton's JSON error
        assert sender.send((body, headers)) is None
    finally:
        sender.close()
    assert [path for path, _ in seen] == ["/v2/models/m/infer"] * 3
    assert all(h.get(KEY[0]) == KEY[1] for _, h in seen), seen


async def test_the_aio_http_sender_sends_the_prebuilt_key_and_names_a_refusal(http_peer):
    url, seen = http_peer
    spec = _spec("http", url, client="aio")
    transports = Transports(spec)
    session = transports.session()
    try:
        send = transports.aio_http_sender(session)
        body, headers = serialize_http(spec)[0]
        assert await send((body, headers)) is None
        assert await send((REFUSED, headers)) == "bad input"
    finally:
        await session.close()
    assert [h.get(KEY[0]) for _, h in seen] == [KEY[1]] * 2


def test_an_unreachable_http_triton_is_an_error_text_not_an_exception():
    sender = Transports(_spec("http", _closed_port())).http_sender()
    try:
        why = sender.send((b"{}", {}))
        assert why is not None and why.startswith("ConnectionRefusedError: ")
    finally:
        sender.close()
