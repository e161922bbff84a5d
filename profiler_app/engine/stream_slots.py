"""Streaming mode of a load worker: decoupled models over gRPC bidirectional streaming.

A decoupled model answers a request with any number of responses; Triton flags the last
one (`triton_final_response`; asked to send it even when empty, with
`triton_enable_empty_final_response`). Responses are matched to their request by id.
Two ways to keep requests outstanding, as perf_analyzer's --streaming:

- at a concurrency (`slot`), each outstanding request has a stream of its own and sends
  its next request when the previous one got its final response;
- at a request rate (`rate`), open-loop arrivals from the level's `Schedule` go out on one
  stream per worker, many in flight on it (perf_analyzer's one stream per context, its
  requests told apart by id), at most `limit` outstanding: the worker's share of
  --max-threads, the project's meaning of it (as its paced threads). With every one of
  them outstanding, the next send waits and goes late (the level reads behind schedule).

Per completed request the worker records, besides the usual `(end_ns, latency_ns)` (the
time to the final response, perf_analyzer 2.48's latency of a decoupled model): the time
to the first response, the number of responses carrying outputs, the empty final-flag
responses, its latency again, the span from its first to its last response carrying
outputs (its mean inter-response time is span / (responses - 1), what goodput checks),
its tokens (one per response, or the elements of the `token_output` tensor of each), and
every inter-response time (between consecutive responses with outputs).
A request without its final response within `stream_timeout_s` is an error with a
message. At a concurrency its stream is cancelled (Triton tells the model) and a new one
carries on; at a rate the stream carries other requests too, so it is only forgotten.
A stream that breaks (Triton went away) fails every request outstanding on it.

Responses are decoded here (their id and final flag are needed), so this path costs
more client CPU per response than the stateless one, which stays as it is. The channel,
and every stream on it with the server's key, come from the worker's `Transports`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .transports import Streams, Transports

FINAL_FLAG = "triton_final_response"
EMPTY_FINAL = "triton_enable_empty_final_response"
REOPEN_PAUSE_S = 0.05  # after a broken stream: Triton may be gone, do not spin
SWEEP_S = 0.05  # how often a rate stream looks for requests past their deadline
LEVEL_POLL_S = 0.1  # a waiting sender wakes at least this often to see a new level
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


def count_tokens(response: Any, token_output: str) -> int:
    """The tokens of a response carrying outputs: 1 (one response is one token, the
    TensorRT-LLM and vLLM streaming convention), or the element count of its
    `token_output` tensor (0 when this response lacks it)."""
    if not token_output:
        return 1
    for output in response.outputs:
        if output.name == token_output:
            return math.prod(output.shape)
    return 0


class _Request:
    """One streamed request, its responses counted as they arrive."""

    __slots__ = ("id", "t0", "deadline", "first", "first_out", "last", "responses", "empties",
                 "tokens", "gaps")  # fmt: skip

    def __init__(self, request_id: str, t0: int, timeout_s: float) -> None:
        self.id = request_id
        self.t0 = t0
        self.deadline = t0 + int(timeout_s * 1e9)
        self.first = self.first_out = self.last = 0
        self.responses = self.empties = self.tokens = 0
        self.gaps: list[int] = []

    def add(self, t: int, response: Any, token_output: str) -> bool:
        """Count one response of this request; True when it is the final one."""
        if not self.first:
            self.first = t
        if response.outputs or response.raw_output_contents:
            if self.responses:
                self.gaps.append(t - self.last)
            else:
                self.first_out = t
            self.responses += 1
            self.last = t
            self.tokens += count_tokens(response, token_output)
        else:
            self.empties += 1
        return FINAL_FLAG in response.parameters and response.parameters[FINAL_FLAG].bool_param

    def record(self, rec: Any, t: int) -> None:
        """The completed request in the worker's Recorder (see `Recorder.stream`)."""
        latency = t - self.t0
        rec.records.append((t, latency))
        rec.stream.append(
            (t, self.first - self.t0, self.responses, self.empties, latency,
             self.last - self.first_out, self.tokens)
        )  # fmt: skip
        rec.gaps.extend((t, gap) for gap in self.gaps)


class StreamSlots:
    """The streams of one worker process, on its event loop."""

    def __init__(
        self, transports: Transports, requests: Sequence[bytes], rec: Any, token_output: str = ""
    ) -> None:
        self.transports = transports
        self.url = transports.url
        self.requests = serialize_streaming(requests)
        self.rec = rec  # the worker's Recorder
        self.token_output = token_output
        self.timeout_s = 30.0
        self.next_id = 0
        self.next_payload = 0
        self.streams: Streams | None = None  # opened in `open`, on the event loop
        import grpc  # here, not at import: the web process imports this module's users
        from tritonclient.grpc import service_pb2

        self.grpc, self.pb = grpc, service_pb2

    async def open(self, timeout_s: float, stream_timeout_s: float) -> dict[str, Any]:
        """The channel, and one checked request: it fails loudly on a bad model or input
        before any window (its first response is enough: the final one may never come)."""
        grpc, service_pb2 = self.grpc, self.pb
        self.timeout_s = stream_timeout_s
        self.streams = self.transports.streams()
        call = self.streams.open()
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
        if self.streams is not None:
            await self.streams.close()

    def open_stream(self) -> Any:
        """A new stream on the channel of `open`, the server's key in its metadata."""
        assert self.streams is not None
        return self.streams.open()

    def stream_error(self, exc: Any) -> str:
        """A broken stream's error in words that say what happened."""
        code = exc.code()
        detail = exc.details() or str(code)
        if code == self.grpc.StatusCode.UNAVAILABLE:
            return f"Triton at {self.url} went away mid-stream ({detail})"
        return detail

    def _next(self) -> tuple[_Request, bytes]:
        """The next request (payloads in turn, a new id), counted as sent."""
        i = self.next_payload
        self.next_payload = (i + 1) % len(self.requests)
        self.next_id += 1
        request_id = str(self.next_id)
        self.rec.sent += 1
        request = _Request(request_id, now_ns(), self.timeout_s)
        return request, with_id(self.requests[i], request_id)

    # --- at a concurrency ---------------------------------------------------------------------

    async def slot(self, still: Callable[[], bool]) -> None:
        """One outstanding request at a time on a stream of its own, while `still()`."""
        while still():
            call = self.open_stream()
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
        request, raw = self._next()
        try:
            await call.write(raw)
            while True:
                left = (request.deadline - now_ns()) / 1e9
                if left <= 0:
                    raise TimeoutError
                raw = await asyncio.wait_for(call.read(), left)
                t = now_ns()
                if raw is grpc.aio.EOF:
                    rec.error(
                        t,
                        f"request {request.id}: Triton closed the stream before its final response",
                    )
                    return False
                message = service_pb2.ModelStreamInferResponse.FromString(raw)
                if message.error_message:
                    rec.error(t, message.error_message)
                    return False
                response = message.infer_response
                if response.id != request.id:
                    continue  # not this request's (none expected: one outstanding per stream)
                if request.add(t, response, self.token_output):
                    request.record(rec, t)
                    return True
        except TimeoutError:
            rec.error(
                now_ns(),
                f"request {request.id}: no final response within {self.timeout_s:g} s "
                "(counted as an error; its stream was cancelled and reopened)",
            )
            return False
        except grpc.aio.AioRpcError as exc:
            rec.error(now_ns(), self.stream_error(exc))
            return False

    # --- at a request rate --------------------------------------------------------------------

    async def rate(self, still: Callable[[], bool], schedule: Any, limit: int) -> None:
        """Open-loop arrivals from `schedule` (its `take()` hands out send times) while
        `still()`, at most `limit` outstanding: a send waits for a free one, then for its
        time. A broken stream is replaced after a pause; at the end of the level the
        requests still outstanding finish (or time out) before the stream closes."""
        while still():
            stream = _RateStream(self)
            try:
                while still() and not stream.broken:
                    if not await stream.wait_below(limit, still):
                        break
                    at = schedule.take()
                    while (left := at - now_ns()) > 0 and still():
                        await asyncio.sleep(min(left / 1e9, LEVEL_POLL_S))
                    if not still() or stream.broken:
                        break  # a broken stream: this send time is lost, the next stream goes on
                    await stream.send(*self._next())
                await stream.drain()
            finally:
                stream.close()
            if still():
                await asyncio.sleep(REOPEN_PAUSE_S)


class _RateStream:
    """One stream of a request-rate level: many requests in flight on it, each response
    matched to its request by id; a reader and a deadline sweeper run beside the sender."""

    def __init__(self, slots: StreamSlots) -> None:
        self.slots = slots
        self.rec = slots.rec
        self.call = slots.open_stream()
        self.pending: dict[str, _Request] = {}  # by send time: deadlines in order
        self.broken = False
        self.freed = asyncio.Event()
        self.tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._sweep())]

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.call.cancel()

    def _done(self, request_id: str) -> _Request | None:
        request = self.pending.pop(request_id, None)
        self.freed.set()
        return request

    def _fail_all(self, t: int, message: str) -> None:
        """The stream is gone: every request outstanding on it failed."""
        self.broken = True
        for request_id in list(self.pending):
            self._done(request_id)
            self.rec.error(t, f"request {request_id}: {message}")
        self.freed.set()

    async def wait_below(self, limit: int, still: Callable[[], bool]) -> bool:
        """Until fewer than `limit` are outstanding; False when the level changed or the
        stream broke first."""
        while len(self.pending) >= limit:
            if not still() or self.broken:
                return False
            await self._freed_or_poll()
        return still() and not self.broken

    async def send(self, request: _Request, raw: bytes) -> None:
        self.pending[request.id] = request
        try:
            await self.call.write(raw)
        except self.slots.grpc.aio.AioRpcError as exc:
            self._fail_all(now_ns(), self.slots.stream_error(exc))
        except asyncio.InvalidStateError:  # the stream ended while the sender slept
            self._fail_all(now_ns(), "the stream had ended when the request went out")

    async def drain(self) -> None:
        """Until every outstanding request finished, failed or timed out."""
        while self.pending and not self.broken:
            await self._freed_or_poll()

    async def _freed_or_poll(self) -> None:
        """Until a request leaves (or LEVEL_POLL_S passed)."""
        self.freed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.freed.wait(), LEVEL_POLL_S)

    async def _read(self) -> None:
        grpc, service_pb2 = self.slots.grpc, self.slots.pb
        rec, token_output = self.rec, self.slots.token_output
        try:
            while True:
                raw = await self.call.read()
                t = now_ns()
                if raw is grpc.aio.EOF:
                    self._fail_all(t, "Triton closed the stream before its final response")
                    return
                message = service_pb2.ModelStreamInferResponse.FromString(raw)
                response = message.infer_response
                if message.error_message:
                    if response.id in self.pending:  # Triton names the request that failed
                        self._done(response.id)
                        rec.error(t, message.error_message)
                        continue
                    self._fail_all(t, message.error_message)  # no request to blame
                    return
                request = self.pending.get(response.id)
                if request is None:
                    continue  # one that timed out already
                if request.add(t, response, token_output):
                    self._done(request.id)
                    request.record(rec, t)
        except grpc.aio.AioRpcError as exc:
            self._fail_all(now_ns(), self.slots.stream_error(exc))

    async def _sweep(self) -> None:
        timeout_s = self.slots.timeout_s
        while True:
            await asyncio.sleep(SWEEP_S)
            t = now_ns()
            for request_id, request in list(self.pending.items()):
                if request.deadline > t:
                    break
                self._done(request_id)
                self.rec.error(
                    t,
                    f"request {request_id}: no final response within {timeout_s:g} s "
                    "(counted as an error; the stream goes on with the others)",
                )
