"""A load worker whose coordinator is gone (the worker process that ran the sweep was
killed) stops, instead of running its pipe's reader for ever."""

from __future__ import annotations

import asyncio
import socket
from multiprocessing.connection import Connection

import numpy as np

from profiler_app.engine.load_workers import Worker
from profiler_app.engine.worker_requests import WorkerSpec

PAYLOAD = [[("INPUT", "INT32", np.array([[3]], dtype=np.int32))]]


def test_a_worker_stops_when_its_coordinator_closes_the_pipe() -> None:
    async def run() -> bool:
        ours, theirs = socket.socketpair()
        worker = Worker(
            WorkerSpec(
                protocol="grpc", url="127.0.0.1:1", model="m", version="", payloads=PAYLOAD,
                client="aio",
            ),
            Connection(ours.detach()),
        )  # fmt: skip
        conn = worker.conn
        worker.loop.add_reader(conn.fileno(), worker.on_command)
        theirs.close()  # the coordinator's end: its process is gone
        await asyncio.wait_for(worker.stopped.wait(), timeout=30)  # a bound, not a target
        # The reader is gone too: nothing fires on the closed pipe any more.
        removed = not worker.loop.remove_reader(conn.fileno())
        conn.close()
        return removed

    assert asyncio.run(run())
