"""The engine's lean gRPC client: against the real Triton, and against a scripted HTTP/2
peer for the frames Triton rarely sends (PING, CONTINUATION, resets, GOAWAY)."""

from __future__ import annotations

import socket
import struct
import threading

import hpack
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from profiler_app.engine import grpc_h2
from profiler_app.engine.grpc_h2 import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PING,
    RST_STREAM,
    SETTINGS,
    GrpcCallError,
    UnaryConnection,
    frame,
)  # fmt: skip
from profiler_app.engine.worker_requests import GRPC_METHOD
from triton_api.client import TritonClient


def infer_request(model: str, values: np.ndarray) -> bytes:
    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "INPUT0", "FP32"
    tensor.shape.extend(values.shape)
    request.raw_input_contents.append(values.astype(np.float32).tobytes())
    return request.SerializeToString()


@pytest.mark.integration
def test_calls_against_triton_return_replies_and_name_errors(triton):
    TritonClient(triton.grpc_url, triton.metrics_url).load("add_batched")
    conn = UnaryConnection(triton.grpc_url, GRPC_METHOD)
    try:
        values = np.arange(16, dtype=np.float32).reshape(1, 16)
        raw = conn.call(infer_request("add_batched", values), reply=True)
        reply = service_pb2.ModelInferResponse.FromString(raw)
        assert reply.model_name == "add_batched" and reply.outputs[0].name == "OUTPUT0"
        out = np.frombuffer(reply.raw_output_contents[0], np.float32)
        assert out.tolist() == (values.ravel() + 1).tolist()
        # Many calls on one connection: HPACK's dynamic table and the windows stay in step.
        for _ in range(300):
            conn.call(infer_request("add_batched", values))
        with pytest.raises(GrpcCallError, match="unknown model: 'no_such_model'"):
            conn.call(infer_request("no_such_model", values))
        with pytest.raises(GrpcCallError, match="INPUT0"):  # wrong shape: Triton's message
            conn.call(infer_request("add_batched", np.zeros((1, 3), np.float32)))
        assert conn.call(infer_request("add_batched", values), reply=True)  # still usable
        # 75 KiB: over the smallest window, so several DATA frames and flow control; it
        # arrives whole (Triton parses it and names the batch size).
        big = infer_request("add_batched", np.zeros((1200, 16), np.float32))
        assert not grpc_h2.fits(big)
        with pytest.raises(GrpcCallError, match="batch-size must be <= 64"):
            conn.call(big)
        conn.stream_window = 1000  # a server with a small window: refused before sending
        with pytest.raises(GrpcCallError, match="over the server's stream window"):
            conn.call(big)
    finally:
        conn.close()


class ScriptedPeer:
    """A one-connection HTTP/2 'server' that answers each request with scripted frames and
    records the frames the client sends."""

    def __init__(self, script) -> None:  # type: ignore[no-untyped-def]
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.script = script
        self.received: list[tuple[int, int, int, bytes]] = []
        self.encoder = hpack.Encoder()  # one per connection, like the dynamic table
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        sock, _ = self.listener.accept()
        with sock:
            data = b""
            while len(data) < len(grpc_h2.PREFACE):
                data += sock.recv(65536)
            data = data[len(grpc_h2.PREFACE) :]

            def read_frame():  # type: ignore[no-untyped-def]
                nonlocal data
                while True:
                    if len(data) >= 9:
                        length = int.from_bytes(data[:3], "big")
                        if len(data) >= 9 + length:
                            kind, flags = data[3], data[4]
                            stream = int.from_bytes(data[5:9], "big")
                            payload, data = data[9 : 9 + length], data[9 + length :]
                            self.received.append((kind, flags, stream, payload))
                            return kind, flags, stream
                    chunk = sock.recv(65536)
                    if not chunk:
                        return None
                    data += chunk

            while (got := read_frame()) is not None:
                kind, flags, stream = got
                if kind == DATA and flags & END_STREAM:
                    sock.sendall(self.script(stream, self.encoder))
                    if self.script is close_after_reply:
                        return


def ok_reply(stream: int, encoder: hpack.Encoder) -> bytes:
    """PING first, response headers split over HEADERS + CONTINUATION, trailers last."""
    block = encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
    message = b"\x00" + struct.pack(">I", 3) + b"abc"
    trailers = encoder.encode([("grpc-status", "0")])
    return (
        frame(PING, 0, 0, b"12345678")
        + frame(SETTINGS, 0, 0)
        + frame(HEADERS, 0, stream, block[:2])
        + frame(CONTINUATION, END_HEADERS, stream, block[2:])
        + frame(DATA, 0, stream, message)
        + frame(HEADERS, END_HEADERS | END_STREAM, stream, trailers)
    )


def error_reply(stream: int, encoder: hpack.Encoder) -> bytes:
    """Trailers-only, as gRPC servers answer errors."""
    block = encoder.encode(
        [(":status", "200"), ("grpc-status", "5"), ("grpc-message", "model%20gone")]
    )
    return frame(HEADERS, END_HEADERS | END_STREAM, stream, block)


def reset_reply(stream: int, encoder: hpack.Encoder) -> bytes:
    return frame(RST_STREAM, 0, stream, struct.pack(">I", 2))


def close_after_reply(stream: int, encoder: hpack.Encoder) -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", stream, 0))


def test_ping_continuation_and_settings_are_handled_and_acknowledged():
    peer = ScriptedPeer(ok_reply)
    conn = UnaryConnection(peer.url, GRPC_METHOD, timeout_s=60)
    try:
        assert conn.call(b"request", reply=True) == b"abc"
        assert conn.call(b"request", reply=True) == b"abc"
    finally:
        conn.close()
    # The peer's record is read only once its thread is done with it (the bound only keeps
    # a broken run from hanging).
    peer.thread.join(120)
    assert not peer.thread.is_alive(), "the scripted peer never saw the connection close"
    kinds = [(kind, flags, payload) for kind, flags, _, payload in peer.received]
    assert (PING, 1, b"12345678") in kinds  # PING answered with ACK and the same payload
    assert (SETTINGS, 1, b"") in kinds  # SETTINGS acknowledged
    streams = [stream for kind, _, stream, _ in peer.received if kind == HEADERS]
    assert streams == [1, 3]  # client streams are odd and increase


def test_grpc_errors_resets_and_goaway_raise_with_their_reason():
    peer = ScriptedPeer(error_reply)
    conn = UnaryConnection(peer.url, GRPC_METHOD, timeout_s=60)
    with pytest.raises(GrpcCallError, match="^model gone$"):
        conn.call(b"x")
    conn.close()
    peer = ScriptedPeer(reset_reply)
    conn = UnaryConnection(peer.url, GRPC_METHOD, timeout_s=60)
    with pytest.raises(GrpcCallError, match="reset the stream"):
        conn.call(b"x")
    conn.close()
    peer = ScriptedPeer(close_after_reply)
    conn = UnaryConnection(peer.url, GRPC_METHOD, timeout_s=60)
    with pytest.raises(ConnectionError, match="GOAWAY|closed"):
        conn.call(b"x")
    conn.close()
