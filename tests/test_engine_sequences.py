"""The built-in engine's sequences against a real Triton: protocol and shape, never speed.

The model is a test-only copy of seq_accumulate that is strict about the protocol: it
answers an error for a request of a sequence that never started (so does Triton), for a
START while its sequence is live (an id two live sequences share, or an END that never
came) and for a sequence that runs past MAX_LENGTH requests without END. With a
--sequence-id-range of exactly one id per concurrent slot, every sequence reuses the id its
slot's previous one just ended: zero errors, at every level, proves START, END and the ids.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiler_app.engine.loadgen import run_sweep
from profiler_app.params import SweepParams
from triton_api.client import TritonClient

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[1] / "examples" / "model_repository" / "seq_accumulate"
LENGTH = 3
STRICT_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _flag(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().flat[0])


def _error(text):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(text))


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.max_length = int(parameters["MAX_LENGTH"]["string_value"])
        self.live = {}  # correlation id -> [requests, running sum]

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
        if not _flag(request, "READY"):
            return pb_utils.InferenceResponse([_output(0, values.shape)])
        corrid = _flag(request, "CORRID")
        if _flag(request, "START"):
            if corrid in self.live:
                return _error(f"sequence {corrid} started again while live")
            self.live[corrid] = [0, 0]
        elif corrid not in self.live:
            return _error(f"sequence {corrid} was never started")
        state = self.live[corrid]
        state[0] += 1
        state[1] += int(values.sum())
        if _flag(request, "END"):
            del self.live[corrid]
        elif state[0] >= self.max_length:
            del self.live[corrid]
            return _error(f"sequence {corrid}: no END after {state[0]} requests")
        return pb_utils.InferenceResponse([_output(state[1], values.shape)])


def _output(total, shape):
    return pb_utils.Tensor("OUTPUT", np.full(shape, total, dtype=np.int32))
"""


@pytest.fixture(scope="module")
def control(triton) -> TritonClient:
    return TritonClient(triton.grpc_url, triton.metrics_url)


@pytest.fixture(scope="module")
def strict(triton, control: TritonClient) -> Iterator[str]:
    folder = triton.repository / "seq_strict"
    shutil.copytree(DEMO, folder, ignore=shutil.ignore_patterns("__pycache__"))
    config = (DEMO / "config.pbtxt").read_text().replace('name: "seq_accumulate"', "")
    parameters = f'parameters [ {{ key: "MAX_LENGTH" value: {{ string_value: "{LENGTH}" }} }} ]'
    (folder / "config.pbtxt").write_text(f'name: "seq_strict"\n{config}\n{parameters}\n')
    (folder / "1" / "model.py").write_text(STRICT_MODEL)
    control.load("seq_strict")
    yield "seq_strict"
    control.unload("seq_strict")
    shutil.rmtree(folder)


def _params(**overrides) -> SweepParams:
    base = dict(
        model="seq_strict",
        start=1,
        end=2,
        measurement_window_ms=300,
        stability_percentage=100,
        max_windows=4,
        sequence_length=LENGTH,
        sequence_length_variation=0,
    )
    return SweepParams(**{**base, **overrides})


def _failures(control: TritonClient, name: str) -> int:
    stats = control.model_statistics(name)
    return sum(int(s.get("inference_stats", {}).get("fail", {}).get("count", 0)) for s in stats)


def _messages(result) -> list[str]:
    return [m for level in result.levels for w in level.windows for m in w.error_messages]


async def test_each_slot_runs_whole_sequences_on_ids_no_other_live_one_holds(
    strict: str, control: TritonClient, triton
) -> None:
    failed_before = _failures(control, strict)
    # Two ids for two slots: each sequence reuses the id its slot's last one just ended.
    result = await run_sweep(_params(sequence_id_range="1:3"), triton.grpc_url)
    assert [lv.level for lv in result.levels] == [1, 2]
    assert sum(lv.errors for lv in result.levels) == 0, _messages(result)
    assert _failures(control, strict) == failed_before  # Triton refused none either
    for level in result.levels:
        extra = level.measured().to_json()["extra"]
        counts = {p: extra[f"{p}_requests"] for p in ("first", "middle", "last")}
        assert all(n > 0 for n in counts.values()), extra
        assert extra["sequences_completed"] == counts["last"] and extra["sequences_failed"] == 0
        assert counts["first"] + counts["middle"] + counts["last"] == level.measured().requests
        # Each slot's requests cycle first, middle, last (length 3, no variation): over the
        # windows pooled, the counts differ by at most one per slot.
        slots = int(level.level)
        assert abs(counts["first"] - counts["middle"]) <= slots, counts
        assert abs(counts["middle"] - counts["last"]) <= slots, counts
        for name in ("first", "middle", "last"):
            assert extra[f"{name}_throughput"] > 0 and extra[f"{name}_p95_us"] > 0


async def test_one_request_sequences_over_http_start_and_end_on_every_request(
    strict: str, control: TritonClient, triton
) -> None:
    failed_before = _failures(control, strict)
    params = _params(protocol="http", client="aio", start=2, sequence_length=1)
    result = await run_sweep(params, triton.http_url)
    [level] = result.levels
    extra = level.measured().to_json()["extra"]
    assert level.errors == 0, _messages(result)
    assert _failures(control, strict) == failed_before
    requests = level.measured().requests
    assert requests > 0
    assert extra["first_requests"] == extra["sequences_completed"] == requests
    assert extra["middle_requests"] == extra["last_requests"] == 0


async def test_a_request_rate_spreads_its_arrivals_over_the_live_sequences(
    strict: str, control: TritonClient, triton
) -> None:
    failed_before = _failures(control, strict)
    params = _params(
        mode="request_rate", start=40, end=40, num_of_sequences=2, sequence_id_range="1:3"
    )
    result = await run_sweep(params, triton.grpc_url)
    [level] = result.levels
    assert level.errors == 0, _messages(result)
    assert _failures(control, strict) == failed_before
    extra = level.measured().to_json()["extra"]
    assert all(extra[f"{p}_requests"] > 0 for p in ("first", "middle", "last")), extra
    assert extra["sequences_completed"] == extra["last_requests"]
    assert level.send_rate > 0
