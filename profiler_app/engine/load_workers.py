"""Worker processes that keep the load on Triton: the hot path of the built-in engine.

Each worker owns one connection and drives a share of the load, recording
`(end_ns, latency_ns)` per request on CLOCK_MONOTONIC (shared by all processes, so the
coordinator can cut windows by its own clock). Requests are serialised once up front
and responses are not decoded, so the per-request Python work is a call and two clock
reads. Two ways to keep requests outstanding:

- "aio": asyncio tasks on one gRPC aio channel / aiohttp session. Cheapest per request
  when many are outstanding (one wake-up serves several completions); request-rate mode
  always uses it.
- "threads": one thread per outstanding request doing blocking calls, perf_analyzer's own
  model. Lowest latency at low concurrency, where the aio poller's thread hop shows. For
  gRPC each thread has a connection of its own through grpc_h2 (about half grpcio's CPU
  per call); requests over 64 KiB go through grpcio. In request-rate mode a fixed pool
  of such threads (`rate_threads`; the sweep's --max-threads shared among the workers)
  takes send times from one schedule: a thread sleeps until its turn, sends, and waits
  for the reply, like perf_analyzer's synchronous request-rate workers.

With `streaming` (decoupled models), the load goes over gRPC bidirectional streams on
the event loop instead (`stream_slots`): a stream per concurrency slot, or at a request
rate the schedule's arrivals on one stream, at most the worker's `rate_threads`
outstanding. They also record per request the time to the first response, the
responses, their tokens, and the inter-response times.

With `sequence` (sequence models), the slots send sequences (`sequence_slots`): every
request carries its sequence's id, START first and END last, and is recorded with its
position in its sequence.

What a worker sends and when is `worker_requests` (its `WorkerSpec`, the requests built
once, a request rate's `Schedule`); what it records, `worker_records`; every connection it
opens, and how one request is sent on it, `transports`.

Protocol with the coordinator (a multiprocessing Pipe, pickled tuples):
  -> ("level", "concurrency"|"request_rate", value, arrival, seed, first_send_ns)
  -> ("swap", t_end_ns)  <- ("records", ends, lats, errors, messages, cpu_s, sent, stream)
     (stream: None, or with `streaming` a dict of arrays, see `Recorder.swap`; with
     `sequence` a 9th element, the positions, see `SequenceSlots.swap`)
  -> ("sequences", first, count, total, seed, level)  <- ("ready", None) or ("error", why)
     (sequence models, before each level: end the live sequences, take statuses)
  -> ("stop",)
  startup: <- ("ready", info) or ("error", message)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from . import grpc_h2
from .sequence_slots import SequenceSlots
from .stream_slots import StreamSlots
from .transports import CONNECT_PAUSE_S, AioSend, Sender, Transports, http_error
from .worker_records import Recorder
from .worker_requests import Schedule, WorkerSpec, serialize_grpc, serialize_http

SEQUENCE_END_TIMEOUT_S = 5.0  # ending the live sequences when the worker stops
now_ns = time.monotonic_ns


class Worker:
    def __init__(self, spec: WorkerSpec, conn: Connection) -> None:
        self.spec = spec
        self.conn = conn
        self.rec = Recorder(spec.streaming)
        self.streams: StreamSlots | None = None
        self.generation = 0  # bumped on every level change: loops of older levels exit
        self.slots = 0
        self.tasks: list[asyncio.Task] = []
        self.threads: list[threading.Thread] = []
        self.loop = asyncio.get_running_loop()
        self.stopped = asyncio.Event()
        self.next_payload = 0
        self.use_h2 = False  # threads mode, gRPC, every request fits: grpc_h2 instead of grpcio
        self.transports = Transports(spec)
        # What the slots share, opened in `open`: gRPC's aio channel and its call ("aio"),
        # the threads' grpcio channel (on first use), HTTP's aiohttp session.
        self.aio_channel: Any = None
        self.aio_call: Any = None
        self.sync_channel: Any = None
        self.session: Any = None
        self.requests: list[Any] = (
            serialize_grpc(spec) if spec.protocol == "grpc" else serialize_http(spec)
        )
        self.sequences: SequenceSlots | None = None
        if spec.sequence is not None:
            self.sequences = SequenceSlots(self, spec.sequence)

    def _checked_request(self) -> Any:
        """The request of the checked call in `open` (a sequence model's is a sequence)."""
        if self.sequences is not None:
            return self.sequences.check_request()
        return self.requests[0]

    # --- connections -------------------------------------------------------------------------

    async def open(self) -> dict[str, Any]:
        spec = self.spec
        if spec.protocol == "grpc":
            import grpc

            if spec.streaming:
                self.streams = StreamSlots(
                    self.transports, self.requests, self.rec, spec.token_output
                )
                return await self.streams.open(spec.timeout_s, spec.stream_timeout_s)
            if spec.client == "threads":
                # No aio channel at all: its poller thread would cost CPU on every call.
                self.use_h2 = all(grpc_h2.fits(r) for r in self.requests)
                try:
                    raw = await asyncio.to_thread(self._first_call_threads)
                except grpc.RpcError as exc:
                    raise RuntimeError(exc.details() or str(exc.code())) from None  # type: ignore[attr-defined]
                except (grpc_h2.GrpcCallError, OSError) as exc:
                    raise RuntimeError(str(exc)) from None
            else:
                self.aio_channel = self.transports.aio_channel()
                self.aio_call = self.transports.unary(self.aio_channel)
                # One checked call: it fails loudly on a bad model/input before any window.
                try:
                    raw = await self.aio_call(self._checked_request(), timeout=spec.timeout_s)
                except grpc.aio.AioRpcError as exc:
                    raise RuntimeError(exc.details() or str(exc.code())) from None
            from tritonclient.grpc import service_pb2

            response = service_pb2.ModelInferResponse.FromString(raw)
            return {"outputs": [o.name for o in response.outputs]}
        self.session = self.transports.session()
        body, headers = self._checked_request()
        path = self.transports.path
        async with self.session.post(path, data=body, headers=headers) as response:
            content = await response.read()
            if response.status != 200:
                raise RuntimeError(http_error(response.status, content))
        return {"outputs": "ok"}

    def _first_call_threads(self) -> bytes:
        if self.use_h2:
            conn = self.transports.h2()
            try:
                return conn.call(self._checked_request(), reply=True)
            finally:
                conn.close()
        call = self.transports.unary(self._sync_channel())
        return call(self._checked_request(), timeout=self.spec.timeout_s)

    async def close(self) -> None:
        if self.sequences is not None:  # END the live sequences: Triton would keep them
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.sequences.end(), SEQUENCE_END_TIMEOUT_S)
        self.generation += 1
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

        def join_threads() -> None:
            for t in self.threads:
                t.join(5)

        await asyncio.to_thread(join_threads)
        if self.streams is not None:
            await self.streams.close()
        if self.aio_channel is not None:
            await self.aio_channel.close()
        if self.sync_channel is not None:
            self.sync_channel.close()
        if self.session is not None:
            await self.session.close()

    def _payload_index(self) -> int:
        i = self.next_payload
        self.next_payload = (i + 1) % len(self.spec.payloads)
        return i

    # --- aio slots -------------------------------------------------------------------------------

    def aio_sender(self) -> AioSend:
        """Sends on the event loop, over the worker's aio call or session."""
        if self.spec.protocol == "grpc":
            return self.transports.aio_grpc_sender(self.aio_call)
        return self.transports.aio_http_sender(self.session)

    async def _once(self, send: AioSend) -> None:
        request = self.requests[self._payload_index()]
        rec = self.rec
        rec.sent += 1
        t0 = now_ns()
        error = await send(request)
        t1 = now_ns()
        if error is None:
            rec.records.append((t1, t1 - t0))
        else:
            rec.error(t1, error)

    async def _aio_slot(self, generation: int) -> None:
        send = self.aio_sender()
        while self.generation == generation:
            await self._once(send)

    async def _rate_loop(self, generation: int, schedule: Schedule) -> None:
        send = self.aio_sender()
        inflight: set[asyncio.Task] = set()
        while self.generation == generation:
            delay = schedule.take() - now_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            if self.generation != generation:
                break
            task = self.loop.create_task(self._once(send))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        await asyncio.gather(*inflight, return_exceptions=True)

    # --- thread slots ----------------------------------------------------------------------------

    def _turn(self, generation: int, index: int, schedule: Schedule | None) -> bool:
        """Whether this thread sends another request (after waiting for its send time
        in request-rate mode); False once the level changed."""
        if self.generation != generation or index >= self.slots:
            return False
        if schedule is None:
            return True
        at = schedule.take()
        while (left := at - now_ns()) > 0:
            time.sleep(min(left / 1e9, 0.1))  # wakes at least every 0.1 s to see a new level
            if self.generation != generation:
                return False
        return True

    def _thread_slot(self, generation: int, index: int, schedule: Schedule | None) -> None:
        """One outstanding request at a time (perf_analyzer's model), on a connection of
        this thread's own (grpc_h2, http.client) or on the worker's grpcio channel."""
        rec = self.rec
        requests = self.requests
        payloads = len(requests)
        i = index % payloads
        sender = self.blocking_sender(self.use_h2)
        try:
            while self._turn(generation, index, schedule):
                why = sender.connect()
                if why is not None:  # not sent: Triton is gone
                    rec.error(now_ns(), why)
                    time.sleep(CONNECT_PAUSE_S)
                    continue
                request = requests[i]
                i = (i + 1) % payloads
                rec.sent += 1
                t0 = now_ns()
                error = sender.send(request)
                t1 = now_ns()
                if error is None:
                    rec.records.append((t1, t1 - t0))
                else:
                    rec.error(t1, error)
        finally:
            sender.close()

    def blocking_sender(self, lean: bool) -> Sender:
        """A sender for the calling thread: on a grpc_h2 connection of its own when ``lean``
        (gRPC, every request fits), else on the worker's grpcio channel; over HTTP, on an
        http.client connection of its own."""
        if self.spec.protocol != "grpc":
            return self.transports.http_sender()
        if lean:
            return self.transports.lean_sender()
        return self.transports.grpc_sender(self._sync_channel())

    def _sync_channel(self) -> Any:
        # One sync channel shared by the threads of this worker (like the aio one).
        if self.sync_channel is None:
            self.sync_channel = self.transports.grpc_channel()
        return self.sync_channel

    # --- commands --------------------------------------------------------------------------------

    def set_level(
        self, kind: str, value: float, arrival: str, seed: int, first_send_ns: int = 0
    ) -> None:
        self.generation += 1  # loops of the previous level finish their call and exit
        gen = self.generation
        schedule = None
        if kind == "request_rate" and value > 0:
            schedule = Schedule(value, arrival, seed, first_send_ns or now_ns())
        if self.sequences is not None:  # its statuses were set by "sequences"
            self.sequences.start(kind, gen, schedule)
            return
        if self.streams is not None:
            self.tasks = [t for t in self.tasks if not t.done()]
            self.tasks += self._stream_tasks(kind, value, schedule, lambda: self.generation == gen)
            return
        if self.spec.client == "threads":
            old = self.threads
            for thread in old:
                thread.join(self.spec.timeout_s)
            if kind == "concurrency":
                self.slots = int(value)
            else:
                self.slots = self.spec.rate_threads if schedule is not None else 0
            self.threads = [
                threading.Thread(target=self._thread_slot, args=(gen, i, schedule), daemon=True)
                for i in range(self.slots)
            ]
            for thread in self.threads:
                thread.start()
            return
        self.tasks = [t for t in self.tasks if not t.done()]
        if kind == "concurrency":
            self.tasks += [self.loop.create_task(self._aio_slot(gen)) for _ in range(int(value))]
        elif schedule is not None:
            self.tasks.append(self.loop.create_task(self._rate_loop(gen, schedule)))

    def _stream_tasks(
        self, kind: str, value: float, schedule: Schedule | None, still: Any
    ) -> list[asyncio.Task]:
        """A streaming level's tasks: a stream per concurrency slot, or one open-loop
        sender at a rate with this worker's share of --max-threads outstanding at most."""
        assert self.streams is not None
        if kind == "concurrency":
            return [self.loop.create_task(self.streams.slot(still)) for _ in range(int(value))]
        if schedule is None:
            return []
        limit = max(1, self.spec.rate_threads)
        return [self.loop.create_task(self.streams.rate(still, schedule, limit))]

    def on_command(self) -> None:
        try:
            self._commands()
        except (EOFError, OSError):
            # The coordinator is gone (its process was killed): stop. The pipe stays
            # readable at its end, so a reader left in place would fire forever.
            with contextlib.suppress(OSError, ValueError):
                self.loop.remove_reader(self.conn.fileno())
            self.stopped.set()

    def _commands(self) -> None:
        while self.conn.poll():
            message = self.conn.recv()
            if message[0] == "level":
                self.set_level(*message[1:])
            elif message[0] == "swap":
                reply = self.rec.swap(message[1])
                if self.sequences is not None:
                    reply = self.sequences.swap(reply, message[1])
                self.conn.send(reply)
            elif message[0] == "sequences" and self.sequences is not None:
                self.sequences.next_level(self.conn, message[1:])
            elif message[0] == "stop":
                self.stopped.set()


async def _serve(spec: WorkerSpec, conn: Connection) -> None:
    worker = Worker(spec, conn)
    try:
        info = await worker.open()
    except Exception as exc:  # noqa: BLE001 - reported to the coordinator verbatim
        conn.send(("error", str(exc) or type(exc).__name__))
        with contextlib.suppress(Exception):
            await worker.close()
        return
    conn.send(("ready", info))
    loop = asyncio.get_running_loop()
    loop.add_reader(conn.fileno(), worker.on_command)
    try:
        await worker.stopped.wait()
    finally:
        loop.remove_reader(conn.fileno())
        await worker.close()


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """Entry point of a worker process."""
    try:
        asyncio.run(_serve(spec, conn))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _main(argv: Sequence[str]) -> None:
    conn = Connection(int(argv[1]))
    spec = conn.recv()
    worker_main(spec, conn)


if __name__ == "__main__":
    import sys

    _main(sys.argv)
