"""Streaming mode of a load worker: decoupled models over gRPC bidirectional streaming.

Like perf_analyzer's --streaming, each outstanding request (a concurrency slot) has a
stream of its own and sends its next request when the previous one got its final
response. A decoupled model answers a request with any number of responses; Triton
flags the last one (`triton_final_response`; asked to send it even when empty, with
`triton_enable_empty_final_response`). Responses are matched to their request by id.

Per completed request the worker records, besides the usual `(end_ns, latency_ns)` (the
time to the final response, perf_analyzer 2.48's latency of a decoupled model): the time
to the first response, the number of responses carrying outputs, the empty final-flag
responses, and every inter-response time (between consecutive responses with outputs).
A request without its final response within `stream_timeout_s` is an error with a
message; its stream is cancelled (Triton tells the model) and a new one carries on.

Responses are decoded here (their id and final flag are needed), so this path costs
more client CPU per response than the stateless one, which stays as it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
FINAL_FLAG = "triton_final_response"
EMPTY_FINAL = "triton_enable_empty_final_response"
REOPEN_PAUSE_S = 0.05  # after a broken stream: Triton may be gone, do not spin
now_ns = time.monotonic_ns


def serialize_streaming(requests: Sequence[bytes]) -> list[bytes]:
    """The stateless requests, asking Triton for the (possibly empty) final response."""
    from tritonclient.grpc import service_pb2

    out = []
    for raw in requests:
        request = service_pb2.ModelInferRequest.FromString(raw)
        request.parameters[EMPTY_FINAL].bool_param = True
        out.append(request.SerializeToString())
    return out


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def with_id(raw: bytes, request_id: str) -> bytes:
    """`raw` with ModelInferRequest.id (field 3) set: protobuf merges appended fields, so
    the request is not serialised again."""
    data = request_id.encode()
    return raw + b"\x1a" + _varint(len(data)) + data


class StreamSlots:
    """The streams of one worker process, on its event loop."""

    def __init__(self, url: str, options: list, requests: Sequence[bytes], rec: Any) -> None:
        self.url = url
        self.options = options
        self.requests = serialize_streaming(requests)
        self.rec = rec  # the worker's Recorder
        self.timeout_s = 30.0
        self.next_id = 0
        self.next_payload = 0
        self.channel: Any = None
        import grpc  # here, not at import: the web process imports this module's users
        from tritonclient.grpc import service_pb2

        self.grpc, self.pb = grpc, service_pb2

    async def open(self, timeout_s: float, stream_timeout_s: float) -> dict[str, Any]:
        """The channel, and one checked request: it fails loudly on a bad model or input
        before any window (its first response is enough: the final one may never come)."""
        grpc, service_pb2 = self.grpc, self.pb
        self.timeout_s = stream_timeout_s
        self.channel = grpc.aio.insecure_channel(self.url, options=self.options)
        self.method = self.channel.stream_stream(
            STREAM_METHOD, request_serializer=None, response_deserializer=None
        )
        call = self.method()
        try:
            await call.write(with_id(self.requests[0], "check"))
            raw = await asyncio.wait_for(call.read(), timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise RuntimeError(exc.details() or str(exc.code())) from None
        except TimeoutError:
            raise RuntimeError(f"no response within {timeout_s:g} s on a gRPC stream") from None
        finally:
            call.cancel()
        if raw is grpc.aio.EOF:
            raise RuntimeError("Triton closed the stream without a response")
        response = service_pb2.ModelStreamInferResponse.FromString(raw)
        if response.error_message:
            raise RuntimeError(response.error_message)
        return {"outputs": [o.name for o in response.infer_response.outputs]}

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()

    async def slot(self, still: Callable[[], bool]) -> None:
        """One outstanding request at a time on a stream of its own, while `still()`."""
        while still():
            call = self.method()
            try:
                while still() and await self._once(call):
                    pass
            finally:
                call.cancel()
            if still():
                await asyncio.sleep(REOPEN_PAUSE_S)

    async def _once(self, call: Any) -> bool:
        """Send one request and read its responses up to the final one; False when the
        stream has to be replaced (timeout, error, closed)."""
        grpc, service_pb2 = self.grpc, self.pb
        rec = self.rec
        i = self.next_payload
        self.next_payload = (i + 1) % len(self.requests)
        self.next_id += 1
        request_id = str(self.next_id)
        rec.sent += 1
        t0 = now_ns()
        deadline = t0 + int(self.timeout_s * 1e9)
        first = last = 0
        responses = empties = 0
        gaps: list[int] = []
        try:
            await call.write(with_id(self.requests[i], request_id))
            while True:
                left = (deadline - now_ns()) / 1e9
                if left <= 0:
                    raise TimeoutError
                raw = await asyncio.wait_for(call.read(), left)
                t = now_ns()
                if raw is grpc.aio.EOF:
                    rec.error(
                        t, f"request {request_id}: the stream closed before its final response"
                    )
                    return False
                message = service_pb2.ModelStreamInferResponse.FromString(raw)
                if message.error_message:
                    rec.error(t, message.error_message)
                    return False
                response = message.infer_response
                if response.id != request_id:
                    continue  # not this request's (none expected: one outstanding per stream)
                if not first:
                    first = t
                if response.outputs or response.raw_output_contents:
                    if responses:
                        gaps.append(t - last)
                    responses += 1
                    last = t
                else:
                    empties += 1
                if FINAL_FLAG in response.parameters and response.parameters[FINAL_FLAG].bool_param:
                    rec.records.append((t, t - t0))
                    rec.stream.append((t, first - t0, responses, empties))
                    rec.gaps.extend((t, gap) for gap in gaps)
                    return True
        except TimeoutError:
            rec.error(
                now_ns(),
                f"request {request_id}: no final response within {self.timeout_s:g} s "
                "(counted as an error; its stream was cancelled and reopened)",
            )
            return False
        except grpc.aio.AioRpcError as exc:
            rec.error(now_ns(), exc.details() or str(exc.code()))
            return False
