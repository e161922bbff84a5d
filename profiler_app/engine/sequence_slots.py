"""Sequence mode of a load worker: a sequence model's requests, sequence by sequence
(`sequences` says how, after perf_analyzer).

The worker's slots become `Status`es: at a concurrency, slot k of this worker owns status k
and runs its sequences back to back; at a request rate, the worker's share of
--num-of-sequences waits in a first-in-first-out queue, and each send time takes the
status that has waited longest, so the arrivals are spread over the live sequences and a
sequence never has two requests outstanding (perf_analyzer's --serial-sequences; with
the paced threads never more than the statuses, one is always free). Both clients
("threads", "aio") and both protocols are driven, over the worker's own transports
(`Worker.blocking_sender`, `Worker.aio_sender`: the stateless slots' senders).

Each completed request is recorded with its position (`records`), and merged into the
worker's swap reply (`swap`); a failed request ends its sequence. Before the next level
the coordinator has every worker end its live sequences (`next_level`), so that the
next level starts with fresh ones, on ids no other live sequence holds. The stateless
path of the worker stays as it is: none of this runs for a model without sequences.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np

from . import grpc_h2
from .sequences import (
    GrpcSequenceRequests,
    HttpSequenceRequests,
    Ids,
    SequenceSpec,
    Status,
    http_sequence_requests,
    slot_rng,
)
from .worker_records import WindowRecords
from .worker_requests import Schedule

if TYPE_CHECKING:
    from .load_workers import Worker
    from .transports import AioSend, Sender

now_ns = time.monotonic_ns
H2_MARGIN = 64  # bytes the sequence parameters add to a request (id, START, END)
LEVEL_POLL_S = 0.1  # a slot waiting for its send time sees a level change this soon


class SequenceSlots(WindowRecords):
    """The sequences of one worker process (`Worker.sequences`)."""

    def __init__(self, worker: Worker, spec: SequenceSpec) -> None:
        self.worker = worker
        self.spec = spec
        self.requests: GrpcSequenceRequests | HttpSequenceRequests
        if worker.spec.protocol == "grpc":
            self.requests = GrpcSequenceRequests(worker.requests)
            self.h2_fits = all(grpc_h2.fits(r + bytes(H2_MARGIN)) for r in self.requests.requests)
        else:
            self.requests = http_sequence_requests(worker.spec.payloads, worker.spec.headers)
            self.h2_fits = False
        self.statuses: list[Status] = []
        self.idle: collections.deque[Status] = collections.deque()
        self.freed = threading.Condition()
        # Completed requests: (end_ns, latency_ns, position, whether it carried END); the
        # failed ones' end_ns (each ended its sequence).
        self.records: list[tuple[int, int, int, bool]] = []
        self.failures: list[int] = []
        self.pending: asyncio.Task | None = None  # `next_level`'s

    def check_request(self) -> Any:
        """The worker's checked call: a one-request sequence (START and END), since a
        sequence model refuses a request outside a sequence."""
        requests = self.requests
        return requests.build(0, requests.tag(self.spec.check_id()), True, True)

    # --- levels ----------------------------------------------------------------------------------

    def next_level(self, conn: Connection, args: Sequence[Any]) -> None:
        """The coordinator's ("sequences", first, count, total, seed, level): end the live
        sequences, then take statuses first..first+count-1 of `total` for the next level;
        answers ("ready", None), or ("error", why). On the event loop, in a task of its own."""
        self.pending = self.worker.loop.create_task(self._next_level(conn, args))

    async def _next_level(self, conn: Connection, args: Sequence[Any]) -> None:
        try:
            await self.end()
            self.configure(*args)
        except Exception as exc:  # noqa: BLE001 - reported to the coordinator verbatim
            conn.send(("error", str(exc) or type(exc).__name__))
        else:
            conn.send(("ready", None))

    def configure(self, first: int, count: int, total: int, seed: int, level: float) -> None:
        spec, payloads = self.spec, len(self.requests)
        self.statuses = []
        for g in range(first, first + count):
            ids = Ids(spec.id_start, spec.id_count, g, total)
            self.statuses.append(Status(spec, ids, slot_rng(seed, level, g), g % payloads))

    def start(self, kind: str, generation: int, schedule: Schedule | None) -> None:
        """The level's slots (`Worker.set_level` after `configure`)."""
        w = self.worker
        self.idle = collections.deque(self.statuses)
        if w.spec.client == "threads":
            if kind == "concurrency":
                w.slots = len(self.statuses)
            else:
                w.slots = w.spec.rate_threads if schedule is not None and self.statuses else 0
            args = [(generation, i, schedule) for i in range(w.slots)]
            w.threads = [
                threading.Thread(target=self._thread_slot, args=a, daemon=True) for a in args
            ]
            for thread in w.threads:
                thread.start()
            return
        if kind == "concurrency":
            w.tasks += [w.loop.create_task(self._aio_slot(generation, s)) for s in self.statuses]
        elif schedule is not None and self.statuses:
            w.tasks.append(w.loop.create_task(self._aio_rate(generation, schedule)))

    async def end(self) -> None:
        """Stop the slots (each finishes its request in flight), then end every live
        sequence with one END request (perf_analyzer's CompleteOngoingSequences): Triton
        would otherwise hold it, and its sequence slot, until the model's idle timeout."""
        w = self.worker
        w.generation += 1
        tasks, w.tasks = w.tasks, []
        threads, w.threads = w.threads, []
        with self.freed:
            self.freed.notify_all()
        await asyncio.gather(*tasks, return_exceptions=True)
        if threads:
            await asyncio.to_thread(_join, threads, w.spec.timeout_s)
        closing = [s.closing_request(self.requests) for s in self.statuses if s.seq_id is not None]
        if not closing:
            return
        if w.spec.client == "threads":
            await asyncio.to_thread(self._close_blocking, closing)
        else:
            send = w.aio_sender()
            await asyncio.gather(*(send(request) for request in closing))

    def _close_blocking(self, closing: list[Any]) -> None:
        sender = self._blocking_sender()
        try:
            for request in closing:
                sender.send(request)
        finally:
            sender.close()

    # --- one request -----------------------------------------------------------------------------

    def _answered(
        self, status: Status, position: int, ended: bool, t0: int, t1: int, error: str | None
    ) -> None:
        if error is None:
            self.records.append((t1, t1 - t0, position, ended))
            status.answered(ended)
        else:
            self.worker.rec.error(t1, f"{status.failed()}: {error}")
            self.failures.append(t1)

    def _once(self, status: Status, sender: Sender) -> None:
        request, position, ended = status.next_request(self.requests)
        self.worker.rec.sent += 1
        t0 = now_ns()
        error = sender.send(request)
        self._answered(status, position, ended, t0, now_ns(), error)

    async def _once_aio(self, status: Status, send: AioSend) -> None:
        request, position, ended = status.next_request(self.requests)
        self.worker.rec.sent += 1
        t0 = now_ns()
        error = await send(request)
        self._answered(status, position, ended, t0, now_ns(), error)

    # --- threads ---------------------------------------------------------------------------------

    def _thread_slot(self, generation: int, index: int, schedule: Schedule | None) -> None:
        w = self.worker
        sender = self._blocking_sender()
        try:
            while w._turn(generation, index, schedule):
                if schedule is None:  # concurrency: the slot's own status
                    self._once(self.statuses[index], sender)
                    continue
                status = self._take(generation)
                if status is None:
                    break
                try:
                    self._once(status, sender)
                finally:
                    with self.freed:
                        self.idle.append(status)
                        self.freed.notify()
        finally:
            sender.close()

    def _take(self, generation: int) -> Status | None:
        """The status that waited longest (None once the level changed)."""
        with self.freed:
            while not self.idle:
                if self.worker.generation != generation:
                    return None
                self.freed.wait(LEVEL_POLL_S)
            return self.idle.popleft()

    def _blocking_sender(self) -> Sender:
        """A sender of the calling thread's own, as the stateless thread slots have: grpc_h2
        where every request fits (with its sequence parameters), else grpcio; http.client."""
        return self.worker.blocking_sender(self.worker.use_h2 and self.h2_fits)

    # --- aio -------------------------------------------------------------------------------------

    async def _aio_slot(self, generation: int, status: Status) -> None:
        send = self.worker.aio_sender()
        while self.worker.generation == generation:
            await self._once_aio(status, send)

    async def _aio_rate(self, generation: int, schedule: Schedule) -> None:
        w = self.worker
        send = w.aio_sender()
        freed = asyncio.Event()
        inflight: set[asyncio.Task] = set()

        async def one(status: Status) -> None:
            try:
                await self._once_aio(status, send)
            finally:
                self.idle.append(status)
                freed.set()

        while w.generation == generation:
            at = schedule.take()
            while (left := at - now_ns()) > 0 and w.generation == generation:
                await asyncio.sleep(min(left / 1e9, LEVEL_POLL_S))  # a level change ends it
            while not self.idle and w.generation == generation:
                freed.clear()  # every sequence has its request outstanding: wait for one
                await freed.wait()
            if w.generation != generation:
                break
            task = w.loop.create_task(one(self.idle.popleft()))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        await asyncio.gather(*inflight, return_exceptions=True)

    # --- records ---------------------------------------------------------------------------------

    def swap(self, reply: tuple, t_end: int) -> tuple:
        """The worker's swap reply (its errors; no completed request of a sequence is in
        it) with this window's completed requests, and their positions after it as a 9th
        element: {"positions", "completed", "failed"}."""
        records = self.take_records(t_end)
        failures, self.failures = self.failures, []
        self.failures[:0] = [f for f in failures if f > t_end]
        n = len(records)
        ends = np.fromiter((r[0] for r in records), dtype=np.int64, count=n)
        lats = np.fromiter((r[1] for r in records), dtype=np.int64, count=n)
        positions = np.fromiter((r[2] for r in records), dtype=np.int8, count=n)
        sequence = {
            "positions": positions,
            "completed": sum(1 for r in records if r[3]),
            "failed": len(failures) - len(self.failures),
        }
        return (reply[0], ends, lats, *reply[3:], sequence)


def _join(threads: Sequence[threading.Thread], timeout_s: float) -> None:
    for thread in threads:
        thread.join(timeout_s)
