"""A blocking gRPC unary client over one HTTP/2 connection, for the engine's hot path.

Why not grpcio here: a sync grpcio call costs about 120 µs of client CPU on this machine,
which at concurrency 1 is added straight to every request's latency (perf_analyzer's C++
client spends far less); this client sends pre-built frames and reads the reply with a few
socket calls (about 30 µs). It implements just what a load generator needs: cleartext
HTTP/2 with prior knowledge, one stream at a time per connection, requests that fit the
server's flow-control window (larger ones keep using grpcio), replies checked for
`grpc-status`. Header blocks are decoded with `hpack` (python-hyper), which keeps the
server's dynamic table in step; everything else is framing.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Sequence
from typing import cast
from urllib.parse import unquote

import hpack

from triton_api.address import split_host_port

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9,
)  # fmt: skip
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4
DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1
MAX_FRAME = 16_384  # the peer's SETTINGS_MAX_FRAME_SIZE before it says otherwise
GRPC_STATUS_NAMES = {
    1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}  # fmt: skip
_HEADER = struct.Struct(">I B I")  # length (24 bits, packed with the type) / flags / stream


class GrpcCallError(Exception):
    """The server answered the call with a non-zero grpc-status (or reset the stream)."""


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return _HEADER.pack(len(payload) << 8 | kind, flags, stream) + payload


def fits(message: bytes) -> bool:
    """Whether a request fits the smallest stream window a server starts with."""
    return len(message) + 5 <= DEFAULT_WINDOW


class UnaryConnection:
    """One HTTP/2 connection making unary gRPC calls to ``method`` one after another."""

    def __init__(
        self,
        url: str,
        method: str,
        timeout_s: float = 30.0,
        key: Sequence[tuple[str, str]] = (),  # the server's key's header, in the block below
    ) -> None:
        self.sock = socket.create_connection(split_host_port(url), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = hpack.Decoder()
        self.buffer = bytearray()
        self.stream = 1
        self.received = 0  # DATA bytes since the connection window was last topped up
        self.send_window = DEFAULT_WINDOW  # what the server lets us send on the connection
        self.stream_window = DEFAULT_WINDOW  # ... and on each new stream
        # Never-indexed literals: the block does not touch the server's dynamic table, so
        # the same bytes serve every request.
        headers = [
            (":method", "POST"), (":scheme", "http"), (":path", method),
            (":authority", url), ("content-type", "application/grpc"), ("te", "trailers"),
            *key,
        ]  # fmt: skip
        self.header_block = hpack.Encoder().encode([(k, v, True) for k, v in headers])
        settings = struct.pack(">HIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE,
                               MAX_WINDOW)  # fmt: skip
        self.sock.sendall(
            PREFACE
            + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW))
        )

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
        self.sock.close()

    def _read_frame(self) -> tuple[int, int, int, bytes]:
        buffer = self.buffer
        while True:
            if len(buffer) >= 9:
                length_kind, flags, stream = _HEADER.unpack_from(buffer)
                length = length_kind >> 8
                if len(buffer) >= 9 + length:
                    payload = bytes(buffer[9 : 9 + length])
                    del buffer[: 9 + length]
                    return length_kind & 0xFF, flags, stream & 0x7FFFFFFF, payload
            chunk = self.sock.recv(262_144)
            if not chunk:
                raise ConnectionError("the server closed the HTTP/2 connection")
            buffer += chunk

    def _handle_control(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        """SETTINGS, PING and connection WINDOW_UPDATE frames, whenever they come."""
        if kind == SETTINGS and not flags & ACK:
            for offset in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HI", payload, offset)
                if key == SETTINGS_INITIAL_WINDOW_SIZE:
                    self.stream_window = value
            self.sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self.sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE and stream == 0:
            self.send_window += struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
        elif kind == GOAWAY:
            raise ConnectionError("the server is closing the HTTP/2 connection (GOAWAY)")

    def call(self, message: bytes, reply: bool = False) -> bytes:
        """Send one request (a serialized protobuf) and wait for the answer; returns the
        reply message when ``reply`` (the load loop skips it). Raises GrpcCallError for a
        gRPC error, OSError (ConnectionError) when the connection fails."""
        body = b"\x00" + struct.pack(">I", len(message)) + message
        if len(body) > self.stream_window:
            raise GrpcCallError(
                f"a {len(body)}-byte request is over the server's stream window "
                f"({self.stream_window} bytes)"
            )
        while self.send_window < len(body):  # wait for the server to open the window
            self._handle_control(*self._read_frame())
        self.send_window -= len(body)
        stream = self.stream
        self.stream += 2
        frames = [frame(HEADERS, END_HEADERS, stream, self.header_block)]
        for start in range(0, len(body), MAX_FRAME):
            last = start + MAX_FRAME >= len(body)
            chunk = body[start : start + MAX_FRAME]
            frames.append(frame(DATA, END_STREAM if last else 0, stream, chunk))
        self.sock.sendall(b"".join(frames))

        status: str | None = None
        detail = ""
        block = b""
        parts: list[bytes] = []
        block_ends_stream = False
        while True:
            kind, flags, sid, payload = self._read_frame()
            if kind == DATA:
                if reply and sid == stream:
                    parts.append(payload)
                self.received += len(payload)
                if self.received > MAX_WINDOW // 2:  # top the connection window up again
                    increment = struct.pack(">I", self.received)
                    self.sock.sendall(frame(WINDOW_UPDATE, 0, 0, increment))
                    self.received = 0
                if sid == stream and flags & END_STREAM:
                    break
            elif kind in (HEADERS, CONTINUATION):
                if kind == HEADERS:
                    block = _header_fragment(flags, payload)
                    block_ends_stream = bool(flags & END_STREAM)
                else:
                    block += payload
                if not flags & END_HEADERS:
                    continue
                # always: keeps the dynamic table in step. hpack annotates decode() as bytes
                # pairs, but without raw=True it returns str pairs.
                fields = cast("list[tuple[str, str]]", self.decoder.decode(block))
                if sid != stream:
                    continue
                for name, value in fields:
                    if name == "grpc-status":
                        status = value
                    elif name == "grpc-message":
                        detail = unquote(value)
                if block_ends_stream:
                    break
            elif kind == RST_STREAM and sid == stream:
                code = struct.unpack(">I", payload[:4])[0]
                raise GrpcCallError(f"the server reset the stream (HTTP/2 error {code})")
            else:
                self._handle_control(kind, flags, sid, payload)
        if status is None:
            raise GrpcCallError("the reply ended without a grpc-status")
        if status != "0":
            code = int(status) if status.isascii() and status.isdigit() and len(status) < 6 else -1
            raise GrpcCallError(detail or GRPC_STATUS_NAMES.get(code, f"grpc-status {status}"))
        return b"".join(parts)[5:]  # past the gRPC message prefix (flag, length)


def _header_fragment(flags: int, payload: bytes) -> bytes:
    start, end = 0, len(payload)
    if flags & PADDED:
        start, end = 1, end - payload[0]
    if flags & PRIORITY:
        start += 5
    return payload[start:end]
