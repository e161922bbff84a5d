"""The demo models of every kind (decoupled, sequence, ensemble, BLS) load on the real
tritonserver and answer as their configs say."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from triton_api.client import TritonClient

pytestmark = pytest.mark.integration

KINDS = ("stream_tok", "seq_accumulate", "ensemble_two_step", "bls_caller")
CALLED = ("add_sub", "add_batched")  # the ensemble's steps; bls_caller calls add_sub


@pytest.fixture(scope="module")
def client(triton) -> Iterator[grpcclient.InferenceServerClient]:
    control = TritonClient(triton.grpc_url, triton.metrics_url)
    before = {name for name in (*KINDS, *CALLED) if _ready(control, name)}
    for name in (*CALLED, *KINDS):
        states = control.load(name)
        assert [s.version for s in states if s.state == "READY"] == ["1"], states
    yield grpcclient.InferenceServerClient(triton.grpc_url)
    for name in (*KINDS, *CALLED):  # leave Triton as it was for the tests after these
        if name not in before:
            control.unload(name)


def _ready(control: TritonClient, name: str) -> bool:
    return any(s.state == "READY" for s in control.model_states(name))


def _tensor(name: str, array: np.ndarray, dtype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return tensor


def _stream(client) -> list:
    """Every response of one stream_tok request over gRPC streaming, final one included."""
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        inputs = [_tensor("PROMPT_ID", np.array([100], dtype=np.int32), "INT32")]
        client.async_stream_infer("stream_tok", inputs, enable_empty_final_response=True)
        got = []
        while True:
            result, error = answers.get(timeout=60)
            assert error is None, error
            got.append(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return got
    finally:
        client.stop_stream()


def test_stream_tok_streams_its_configured_count_of_tokens_then_an_empty_final(client):
    responses = _stream(client)
    tokens = [r.as_numpy("TOKEN") for r in responses[:-1]]
    assert [int(t[0]) for t in tokens] == list(range(101, 109))  # RESPONSE_COUNT 8
    final = responses[-1].get_response()
    assert not final.outputs  # the final flag comes alone, in an empty response


def test_stream_tok_answers_only_over_streaming(client):
    inputs = [_tensor("PROMPT_ID", np.array([1], dtype=np.int32), "INT32")]
    with pytest.raises(InferenceServerException, match="(?i)decoupled"):
        client.infer("stream_tok", inputs)


def _step(client, corrid: int, value: int, *, start=False, end=False):
    return client.infer(
        "seq_accumulate",
        [_tensor("INPUT", np.array([[value]], dtype=np.int32), "INT32")],
        sequence_id=corrid,
        sequence_start=start,
        sequence_end=end,
    ).as_numpy("OUTPUT")


def test_seq_accumulate_keeps_a_running_sum_per_sequence(client):
    assert _step(client, 7, 5, start=True)[0][0] == 5
    assert _step(client, 8, 100, start=True)[0][0] == 100  # another sequence, interleaved
    assert _step(client, 7, 2)[0][0] == 7
    assert _step(client, 8, 1, end=True)[0][0] == 101
    assert _step(client, 7, 3, end=True)[0][0] == 10


def test_seq_accumulate_refuses_a_request_whose_sequence_never_started(client):
    with pytest.raises(InferenceServerException, match="START"):
        _step(client, 99, 1)


def test_ensemble_two_step_runs_both_steps(client):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.float32)
    inputs = [_tensor("INPUT0", a, "FP32"), _tensor("INPUT1", b, "FP32")]
    result = client.infer("ensemble_two_step", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b + 1)


def test_bls_caller_calls_add_sub(client):
    a = np.linspace(-3, 3, 16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    inputs = [_tensor("INPUT0", a, "FP32"), _tensor("INPUT1", b, "FP32")]
    result = client.infer("bls_caller", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), (a + b) * (a - b), rtol=1e-6)
