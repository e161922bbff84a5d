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
once, a request rate's `Schedule`); what it records, `worker_records`.

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
import http.client
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import hpack

from . import grpc_h2
from .sequence_slots import SequenceSlots
from .stream_slots import StreamSlots
from .worker_records import Recorder
from .worker_requests import (
    GRPC_METHOD,
    Schedule,
    WorkerSpec,
    http_connection,
    http_error,
    http_path,
    serialize_grpc,
    serialize_http,
    unary_call,
)

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
        if spec.protocol == "grpc":
            self.grpc_requests = serialize_grpc(spec)
        else:
            self.http_requests = serialize_http(spec)
            self.http_path = http_path(spec)
        self.sequences: SequenceSlots | None = None
        if spec.sequence is not None:
            self.sequences = SequenceSlots(self, spec.sequence, GRPC_METHOD, http_error)

    def _checked_request(self) -> Any:
        """The request of the checked call in `open` (a sequence model's is a sequence)."""
        if self.sequences is not None:
            return self.sequences.check_request()
        return self.grpc_requests[0] if self.spec.protocol == "grpc" else self.http_requests[0]

    # --- connections -------------------------------------------------------------------------

    async def open(self) -> dict[str, Any]:
        spec = self.spec
        if spec.protocol == "grpc":
            import grpc

            options = [
                ("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", -1),
            ]
            self.sync_options = options
            if spec.streaming:
                self.aio_channel = None
                self.streams = StreamSlots(
                    spec.url,
                    options,
                    self.grpc_requests,
                    self.rec,
                    spec.token_output,
                    headers=spec.headers,
                )
                return await self.streams.open(spec.timeout_s, spec.stream_timeout_s)
            if spec.client == "threads":
                # No aio channel at all: its poller thread would cost CPU on every call.
                self.aio_channel = None
                self.use_h2 = all(grpc_h2.fits(r) for r in self.grpc_requests)
                try:
                    raw = await asyncio.to_thread(self._first_call_threads)
                except grpc.RpcError as exc:
                    raise RuntimeError(exc.details() or str(exc.code())) from None  # type: ignore[attr-defined]
                except (grpc_h2.GrpcCallError, OSError) as exc:
                    raise RuntimeError(str(exc)) from None
            else:
                self.aio_channel = grpc.aio.insecure_channel(spec.url, options=options)
                self.aio_call = unary_call(self.aio_channel, GRPC_METHOD, spec.headers)
                # One checked call: it fails loudly on a bad model/input before any window.
                try:
                    raw = await self.aio_call(self._checked_request(), timeout=spec.timeout_s)
                except grpc.aio.AioRpcError as exc:
                    raise RuntimeError(exc.details() or str(exc.code())) from None
            from tritonclient.grpc import service_pb2

            response = service_pb2.ModelInferResponse.FromString(raw)
            return {"outputs": [o.name for o in response.outputs]}
        import aiohttp

        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        self.session = aiohttp.ClientSession(
            f"http://{spec.url}",
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=spec.timeout_s),
        )
        body, headers = self._checked_request()
        async with self.session.post(self.http_path, data=body, headers=headers) as response:
            content = await response.read()
            if response.status != 200:
                raise RuntimeError(http_error(response.status, content))
        return {"outputs": "ok"}

    def _first_call_threads(self) -> bytes:
        spec = self.spec
        if self.use_h2:
            conn = grpc_h2.UnaryConnection(spec.url, GRPC_METHOD, spec.timeout_s, spec.headers)
            try:
                return conn.call(self._checked_request(), reply=True)
            finally:
                conn.close()
        call = unary_call(self._sync_channel(), GRPC_METHOD, spec.headers)
        return call(self._checked_request(), timeout=spec.timeout_s)

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
        if self.spec.protocol == "grpc":
            if self.aio_channel is not None:
                await self.aio_channel.close()
            if hasattr(self, "sync_channel"):
                self.sync_channel.close()
        else:
            await self.session.close()

    def _payload_index(self) -> int:
        i = self.next_payload
        self.next_payload = (i + 1) % len(self.spec.payloads)
        return i

    # --- aio slots -------------------------------------------------------------------------------

    async def _grpc_once(self) -> None:
        import grpc

        raw = self.grpc_requests[self._payload_index()]
        rec = self.rec
        rec.sent += 1
        t0 = now_ns()
        try:
            await self.aio_call(raw, timeout=self.spec.timeout_s)
        except grpc.aio.AioRpcError as exc:
            rec.error(now_ns(), exc.details() or str(exc.code()))
        else:
            t1 = now_ns()
            rec.records.append((t1, t1 - t0))

    async def _http_once(self) -> None:
        body, headers = self.http_requests[self._payload_index()]
        rec = self.rec
        rec.sent += 1
        t0 = now_ns()
        try:
            async with self.session.post(self.http_path, data=body, headers=headers) as response:
                content = await response.read()
                status = response.status
        except Exception as exc:  # noqa: BLE001 - any transport failure counts as an error
            rec.error(now_ns(), f"{type(exc).__name__}: {exc}")
            return
        t1 = now_ns()
        if status == 200:
            rec.records.append((t1, t1 - t0))
        else:
            rec.error(t1, http_error(status, content))

    async def _aio_slot(self, generation: int) -> None:
        once = self._grpc_once if self.spec.protocol == "grpc" else self._http_once
        while self.generation == generation:
            await once()

    async def _rate_loop(self, generation: int, schedule: Schedule) -> None:
        once = self._grpc_once if self.spec.protocol == "grpc" else self._http_once
        inflight: set[asyncio.Task] = set()
        while self.generation == generation:
            delay = schedule.take() - now_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            if self.generation != generation:
                break
            task = self.loop.create_task(once())
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
        spec = self.spec
        rec = self.rec
        payloads = len(spec.payloads)
        i = index % payloads
        if spec.protocol == "grpc" and self.use_h2:
            self._h2_slot(generation, index, i, schedule)
            return
        if spec.protocol == "grpc":
            import grpc

            channel = self._sync_channel()
            call = unary_call(channel, GRPC_METHOD, spec.headers)
            requests = self.grpc_requests
            while self._turn(generation, index, schedule):
                raw = requests[i]
                i = (i + 1) % payloads
                rec.sent += 1
                t0 = now_ns()
                try:
                    call(raw, timeout=spec.timeout_s)
                except grpc.RpcError as exc:
                    rec.error(now_ns(), exc.details() or str(exc.code()))  # type: ignore[attr-defined]
                else:
                    t1 = now_ns()
                    rec.records.append((t1, t1 - t0))
            return
        conn = http_connection(spec.url, spec.timeout_s)
        try:
            while self._turn(generation, index, schedule):
                body, headers = self.http_requests[i]
                i = (i + 1) % payloads
                rec.sent += 1
                t0 = now_ns()
                try:
                    conn.request("POST", self.http_path, body=body, headers=headers)
                    response = conn.getresponse()
                    content = response.read()
                except (OSError, http.client.HTTPException) as exc:
                    rec.error(now_ns(), f"{type(exc).__name__}: {exc}")
                    conn.close()
                    continue
                t1 = now_ns()
                if response.status == 200:
                    rec.records.append((t1, t1 - t0))
                else:
                    rec.error(t1, http_error(response.status, content))
        finally:
            conn.close()

    def _h2_slot(self, generation: int, index: int, i: int, schedule: Schedule | None) -> None:
        """One outstanding gRPC request at a time on a connection of this thread's own
        (perf_analyzer's model), through the lean HTTP/2 client."""
        spec = self.spec
        rec = self.rec
        requests = self.grpc_requests
        payloads = len(requests)
        conn: grpc_h2.UnaryConnection | None = None
        try:
            while self._turn(generation, index, schedule):
                if conn is None:
                    try:
                        conn = grpc_h2.UnaryConnection(
                            spec.url, GRPC_METHOD, spec.timeout_s, spec.headers
                        )
                    except OSError as exc:
                        rec.error(now_ns(), f"cannot connect to {spec.url}: {exc}")
                        time.sleep(0.05)  # Triton is gone: do not spin
                        continue
                raw = requests[i]
                i = (i + 1) % payloads
                rec.sent += 1
                t0 = now_ns()
                try:
                    conn.call(raw)
                except grpc_h2.GrpcCallError as exc:
                    rec.error(now_ns(), str(exc))
                except (OSError, hpack.HPACKError) as exc:
                    rec.error(now_ns(), f"{type(exc).__name__}: {exc}")
                    conn.close()
                    conn = None
                else:
                    t1 = now_ns()
                    rec.records.append((t1, t1 - t0))
        finally:
            if conn is not None:
                conn.close()

    def _sync_channel(self) -> Any:
        # One sync channel shared by the threads of this worker (like the aio one).
        if not hasattr(self, "sync_channel"):
            import grpc

            self.sync_channel = grpc.insecure_channel(self.spec.url, options=self.sync_options)
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
