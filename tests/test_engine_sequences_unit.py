"""Sequences in the built-in engine without Triton: lengths drawn like perf_analyzer's, ids
unique among the live sequences of every slot and worker, the sequence parameters as
Triton reads them, the protocol a worker's slots keep (decoded from the very bytes they
send, over a fake transport), and what a window and a level report by position."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from profiler_app import measure
from profiler_app.engine import sequences, stats
from profiler_app.engine.load_workers import Worker
from profiler_app.engine.merging import _level_sequences, merge_level
from profiler_app.engine.results import WindowResult
from profiler_app.engine.sequences import (
    FIRST,
    LAST,
    MIDDLE,
    Ids,
    SequenceRecords,
    SequenceSpec,
    draw_length,
)
from profiler_app.engine.worker_pool import split_load
from profiler_app.engine.worker_requests import WorkerSpec
from profiler_app.params import SweepParams

PAYLOAD = [[("INPUT", "INT32", np.array([[3]], dtype=np.int32))]]

# --- lengths -----------------------------------------------------------------------------------


def test_lengths_stay_within_the_variation_and_at_least_one():
    rng = random.Random(1)
    drawn = [draw_length(rng, 20, 20) for _ in range(5000)]
    assert min(drawn) >= 16 and max(drawn) <= 24  # 20 ± 20 %, truncated toward zero
    assert len(set(drawn)) > 3  # it does vary
    assert all(draw_length(rng, 1, 100) >= 1 for _ in range(1000))
    assert {draw_length(rng, 2, 100) for _ in range(2000)} <= {1, 2, 3}


def test_no_variation_gives_exactly_the_length():
    rng = random.Random(5)
    assert {draw_length(rng, 7, 0) for _ in range(500)} == {7}


def test_the_same_seed_draws_the_same_lengths_and_another_seed_others():
    def draws(seed: int, level: float, slot: int) -> list[int]:
        rng = sequences.slot_rng(seed, level, slot)
        return [draw_length(rng, 20, 20) for _ in range(50)]

    assert draws(3, 2, 1) == draws(3, 2, 1)
    assert draws(3, 2, 1) != draws(4, 2, 1)
    assert draws(3, 2, 1) != draws(3, 2, 0)  # slots draw apart


# --- ids -------------------------------------------------------------------------------------------


def test_ids_of_the_slots_never_meet_and_wrap_inside_the_range():
    total, start, count = 3, 10, 8  # --sequence-id-range 10:18, three slots
    slots = [Ids(start, count, g, total) for g in range(total)]
    taken = [[ids.take() for _ in range(10)] for ids in slots]
    assert taken[0][:4] == [10, 13, 16, 10]  # wraps back to its first id
    assert taken[1][:4] == [11, 14, 17, 11]
    assert taken[2][:3] == [12, 15, 12]  # 18 is the range's end, excluded
    mine = [set(got) for got in taken]
    assert not (mine[0] & mine[1]) and not (mine[1] & mine[2]) and not (mine[0] & mine[2])


def test_ids_stay_apart_across_workers_numbered_like_the_pool_numbers_them():
    # A concurrency of 7 over 3 worker processes: each takes its share of the slots, numbered
    # across the workers (`WorkerPool.start_sequences`); every slot's ids are its own.
    shares = [int(n) for n in split_load("concurrency", 7, 3)]
    first, seen = 0, {}
    for worker, count in enumerate(shares):
        for g in range(first, first + count):
            ids = Ids(1, 100, g, 7)
            for seq_id in (ids.take() for _ in range(40)):
                assert seen.setdefault(seq_id, (worker, g)) == (worker, g)
        first += count
    assert first == 7 and len(seen) == 100  # the whole range in use, no id shared


def test_a_range_narrower_than_the_slots_is_refused():
    with pytest.raises(ValueError, match="no id"):
        Ids(1, 2, 2, 3)


def test_the_default_range_is_perf_analyzers():
    assert sequences.id_range("") == (1, 2**32 - 1)
    assert sequences.id_range("5:9") == (5, 4)
    assert sequences.id_range("5") == (5, 2**32 - 1)
    spec = SequenceSpec.of(SweepParams(model="m", sequence_id_range="100:104"))
    assert (spec.id_start, spec.id_count) == (100, 4)
    assert SequenceSpec(3, 0, 100, 4, worker=6).check_id() == 102


# --- the requests, as Triton reads them ------------------------------------------------------------


def _params(raw: bytes) -> dict[str, Any]:
    request = service_pb2.ModelInferRequest.FromString(raw)
    out: dict[str, Any] = {}
    for key, value in request.parameters.items():
        out[key] = getattr(value, value.WhichOneof("parameter_choice"))
    return out


@pytest.mark.parametrize(
    ("start", "end"), [(True, False), (False, False), (False, True), (True, True)]
)
def test_grpc_requests_carry_the_id_and_their_flags_appended(start, end):
    base = service_pb2.ModelInferRequest(model_name="m", id="x").SerializeToString()
    requests = sequences.GrpcSequenceRequests([base])
    raw = requests.build(0, requests.tag(42), start, end)
    request = service_pb2.ModelInferRequest.FromString(raw)
    assert request.model_name == "m" and request.id == "x"  # the request itself unchanged
    expected: dict[str, Any] = {"sequence_id": 42}
    if start:
        expected["sequence_start"] = True
    if end:
        expected["sequence_end"] = True
    assert _params(raw) == expected


def test_an_id_over_2_63_keeps_its_bits():
    raw = sequences.GrpcSequenceRequests([b""]).build(0, sequences.grpc_id(2**64 - 1), True, True)
    assert _params(raw)["sequence_id"] % 2**64 == 2**64 - 1  # int64 -1: Triton's uint64 max


def test_http_requests_carry_the_id_in_their_json_header():
    requests = sequences.http_sequence_requests(PAYLOAD)
    body, headers = requests.build(0, requests.tag(123456789), True, False)
    size = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:size])
    assert header["parameters"]["sequence_id"] == 123456789
    assert header["parameters"]["sequence_start"] is True
    assert header["parameters"]["sequence_end"] is False
    assert header["inputs"][0]["name"] == "INPUT"
    assert np.frombuffer(body[size:], dtype=np.int32).tolist() == [3]  # the binary data


# --- a worker's slots, over a fake transport ------------------------------------------------------


class Failed(grpc.RpcError):
    """What grpcio's blocking call raises for an error answer."""

    def details(self) -> str:
        return "boom"

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INTERNAL


class Sent:
    """Every request a worker sent, decoded: (sequence id, START, END), in order; and the
    requests outstanding per id (two at once for one sequence is a protocol error)."""

    def __init__(self, fail_every: int = 0) -> None:
        self.log: list[tuple[int, bool, bool]] = []
        self.outstanding: set[int] = set()
        self.overlaps = 0
        self.failed: list[int] = []  # the ids whose request failed
        self.fail_every = fail_every
        self.lock = threading.Lock()

    def enter(self, raw: bytes) -> tuple[int, bool]:
        p = _params(raw)
        seq_id = p["sequence_id"]
        with self.lock:
            self.log.append((seq_id, p.get("sequence_start", False), p.get("sequence_end", False)))
            if seq_id in self.outstanding:
                self.overlaps += 1
            self.outstanding.add(seq_id)
            fail = bool(self.fail_every) and len(self.log) % self.fail_every == 0
            if fail:
                self.failed.append(seq_id)
        return seq_id, fail

    def leave(self, seq_id: int) -> None:
        with self.lock:
            self.outstanding.discard(seq_id)


def _worker(client: str, sent: Sent, length: int = 3, **spec: Any) -> Worker:
    a, _b = socket.socketpair()
    worker = Worker(
        WorkerSpec(
            protocol="grpc", url="127.0.0.1:1", model="m", version="", payloads=PAYLOAD,
            client=client, sequence=SequenceSpec(length, 0), **spec,
        ),
        Connection(a.detach()),
    )  # fmt: skip

    async def aio_call(raw: bytes, timeout: float) -> None:
        seq_id, fail = sent.enter(raw)
        await asyncio.sleep(0.0005)
        sent.leave(seq_id)
        if fail:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "boom"
            )

    class Channel:
        def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
            def call(raw: bytes, timeout: float) -> None:
                seq_id, fail = sent.enter(raw)
                time.sleep(0.0005)
                sent.leave(seq_id)
                if fail:
                    raise Failed()

            return call

    worker.aio_call = aio_call
    worker._sync_channel = Channel  # type: ignore[method-assign]
    return worker


async def _run(worker: Worker, kind: str, value: float, sent: Sent, requests: int) -> tuple:
    assert worker.sequences is not None
    count = int(value) if kind == "concurrency" else 2  # --num-of-sequences 2
    worker.sequences.configure(0, count, count, 7, value)
    worker.set_level(kind, value, "constant", 7)
    deadline = time.monotonic() + 30
    while len(sent.log) < requests and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    sent.fail_every = 0  # the closing ENDs below answer: they are not what is measured
    await worker.sequences.end()  # what the next level (or the end) does first
    t_end = time.monotonic_ns()
    return worker.sequences.swap(worker.rec.swap(t_end), t_end)


def _sequences_of(log: list[tuple[int, bool, bool]]) -> list[list[tuple[int, bool, bool]]]:
    """The requests grouped by sequence (an id's START opens one), checking on the way
    that every request but a START belongs to a live sequence and no START meets a live
    one: ids are unique among the live sequences."""
    live: dict[int, list[tuple[int, bool, bool]]] = {}
    done = []
    for item in log:
        seq_id, start, end = item
        if start:
            assert seq_id not in live, f"id {seq_id} started again while live"
            live[seq_id] = []
        assert seq_id in live, f"a request of sequence {seq_id}, which is not live"
        live[seq_id].append(item)
        if end:
            done.append(live.pop(seq_id))
    assert not live, f"sequences left without END: {sorted(live)}"
    return done


def _flags(log: list[tuple[int, bool, bool]]) -> dict[str, int]:
    return {
        "first": sum(1 for _, start, _ in log if start),
        "middle": sum(1 for _, start, end in log if not start and not end),
        "last": sum(1 for _, start, end in log if end and not start),
    }


@pytest.mark.parametrize("client", ["aio", "threads"])
async def test_slots_send_sequences_back_to_back_and_end_them_at_the_level_change(client):
    sent = Sent()
    reply = await _run(_worker(client, sent), "concurrency", 3, sent, 300)
    done = _sequences_of(sent.log)  # START first, END last, ids unique among the live
    assert sent.overlaps == 0  # one request of a sequence at a time
    positions = reply[8]["positions"].tolist()
    # Recorded: every request but the closing ENDs, sent after the slots stopped (outside
    # every window), one per sequence live then: at most one per slot.
    closing = len(sent.log) - len(positions)
    assert 0 <= closing <= 3 and all(end for _, _, end in sent.log[len(positions) :])
    assert len(done) > 30
    whole = [s for s in done if s[-1] not in sent.log[len(positions) :]]
    assert len(whole) >= len(done) - closing and all(len(s) == 3 for s in whole)
    # The positions recorded are the flags sent: START first, END last, neither middle.
    wire = _flags(sent.log[: len(positions)])
    assert positions.count(FIRST) == wire["first"] == len(done)
    assert positions.count(MIDDLE) == wire["middle"]
    assert positions.count(LAST) == wire["last"] == reply[8]["completed"] == len(done) - closing
    assert reply[1].size == reply[2].size == len(positions)
    assert reply[3] == 0 and reply[8]["failed"] == 0


async def test_the_sequences_live_at_a_level_change_get_an_end_each():
    sent = Sent()
    worker = _worker("aio", sent, length=1000)  # no sequence completes before the change
    reply = await _run(worker, "concurrency", 3, sent, 30)
    recorded = reply[8]["positions"].size
    closing = sent.log[recorded:]
    assert len(closing) == 3 and all(end and not start for _, start, end in closing)
    assert {seq_id for seq_id, _, _ in closing} == {1, 2, 3}  # one per slot, on its own id
    _sequences_of(sent.log)  # nothing left live
    assert reply[8]["completed"] == 0  # those ENDs are outside every window
    worker.sequences.configure(0, 2, 2, 7, 2)  # the next level: fresh sequences
    worker.set_level("concurrency", 2, "constant", 7)
    while len(sent.log) < recorded + 3 + 4:
        await asyncio.sleep(0.005)
    await worker.sequences.end()
    assert sent.log[recorded + 3][1] and sent.log[recorded + 4][1]  # each starts with START


async def test_a_one_request_sequence_is_first_and_completes():
    sent = Sent()
    reply = await _run(_worker("aio", sent, length=1), "concurrency", 2, sent, 50)
    assert all(start and end for _, start, end in sent.log)
    positions = reply[8]["positions"].tolist()
    assert set(positions) == {FIRST} and reply[8]["completed"] == len(positions) == len(sent.log)


@pytest.mark.parametrize("client", ["aio", "threads"])
async def test_a_failed_request_ends_its_sequence_and_the_slot_starts_a_new_one(client):
    sent = Sent(fail_every=5)
    reply = await _run(_worker(client, sent), "concurrency", 2, sent, 100)
    assert len(sent.failed) >= 10
    for seq_id in sent.failed:  # neither continued nor retried: its failed request is its last
        failed_at = [i for i, item in enumerate(sent.log) if item[0] == seq_id][-1]
        assert (failed_at + 1) % 5 == 0
    # The others are whole sequences: the slot's next request after a failure is a START.
    _sequences_of([item for item in sent.log if item[0] not in sent.failed])
    errors, messages = reply[3], reply[4]
    assert errors == reply[8]["failed"] == len(sent.failed)
    assert messages and all(m.startswith("sequence ") and m.endswith(": boom") for m in messages)
    assert " of 3): boom" in messages[0] and "(request " in messages[0]


@pytest.mark.parametrize("client", ["aio", "threads"])
async def test_a_request_rate_spreads_over_the_sequences_one_request_each_at_a_time(client):
    sent = Sent()
    worker = _worker(client, sent, rate_threads=2)
    reply = await _run(worker, "request_rate", 2000, sent, 200)
    done = _sequences_of(sent.log)
    assert sent.overlaps == 0  # a sequence's next request only after its previous one
    ids = {seq_id for seq_id, _, _ in sent.log}
    assert any(i % 2 for i in ids) and any(i % 2 == 0 for i in ids)  # both sequences used
    assert len(done) > 10 and reply[8]["positions"].size == reply[1].size > 0


# --- what a window and a level report ------------------------------------------------------------


def _records(positions: list[int], lats_us: list[int], completed: int, failed: int = 0):
    return SequenceRecords(
        np.array(positions, np.int8), np.array(lats_us, np.int64) * 1000, completed, failed
    )


def test_a_window_reports_each_position_with_perf_analyzers_percentiles():
    records = _records([0, 1, 1, 2, 0, 1, 1, 2], [10, 20, 30, 40, 11, 21, 31, 41], 2)
    summary = records.summary(2.0)
    assert summary.first.requests == 2 and summary.middle.requests == 4
    assert summary.last.requests == 2 and summary.sequences_completed == 2
    assert summary.first.throughput == 1.0 and summary.middle.throughput == 2.0
    assert summary.middle.latency == stats.summarize_latencies([20_000, 30_000, 21_000, 31_000])
    fields = measure.sequence_fields(summary)
    assert set(fields) == set(measure.SEQUENCE_FIELDS)
    assert fields["first_p95_us"] == 11.0 and fields["last_avg_us"] == 40.5
    assert fields["middle_throughput"] == 2.0 and fields["sequences_failed"] == 0
    assert measure.sequence_fields(None) == {}
    empty = _records([0], [5], 0).summary(1.0)
    assert measure.sequence_fields(empty)["middle_p95_us"] is None  # none measured there


def build_window(index: int, records: SequenceRecords) -> WindowResult:
    lats = records.latencies_ns
    return WindowResult(
        level=2, index=index, duration_s=1.0, requests=int(lats.size), inferences=int(lats.size),
        throughput=float(lats.size), latency=stats.summarize_latencies(lats.tolist()),
        errors=records.failed, error_messages=[], server=None, client_cpu_us=0.0,
        send_rate=0.0, latencies_ns=lats, sequence=records,
    )  # fmt: skip


def test_a_level_pools_its_last_windows_positions_as_its_latencies():
    windows = [
        build_window(0, _records([0, 0, 0], [900, 900, 900], 0, failed=1)),
        build_window(1, _records([0, 1], [10, 20], 0)),
        build_window(2, _records([2, 0], [30, 12], 1)),
        build_window(3, _records([1, 2], [22, 32], 1)),
    ]
    level = merge_level(2, windows, SweepParams(model="m", start=2, end=2), False)
    extra = level.measured().to_json()["extra"]
    last3 = SequenceRecords.pooled([w.sequence for w in windows[1:]])
    assert extra["first_requests"] == 2 and extra["middle_requests"] == 2
    assert extra["last_requests"] == 2 and extra["sequences_completed"] == 2
    assert extra["first_p95_us"] == last3.summary(3.0).first.latency.p95_us == 12.0
    assert extra["first_throughput"] == pytest.approx(2 / 3)  # over the last windows' 3 s
    assert extra["sequences_failed"] == 1  # like the errors: every window's
    assert level.errors == 1
    assert _level_sequences(windows, windows[1:]) is not None
    plain = [build_window(0, _records([0], [5], 1))]
    plain[0].sequence = None  # a stateless sweep's window
    assert _level_sequences(plain, plain) is None
    assert windows[1].measured().to_json()["extra"]["middle_requests"] == 1
    assert "middle_requests" not in plain[0].measured().to_json()["extra"]
