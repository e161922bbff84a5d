"""Every demo model loads on the real tritonserver and computes what it claims."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from triton_api.client import TritonClient

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def loaded(triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    for name in ("add_sub", "add_batched", "busy_compute"):
        states = client.load(name)
        assert [s.version for s in states if s.state == "READY"] == ["1"], states
    return grpcclient.InferenceServerClient(triton.grpc_url)


def _infer(client, model, inputs, outputs):
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(
        model, tensors, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs]
    )
    return {o: result.as_numpy(o) for o in outputs}


def test_add_sub_adds_and_subtracts(loaded):
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    out = _infer(loaded, "add_sub", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


def test_add_batched_adds_one(loaded):
    a = np.random.default_rng(0).random((3, 16), dtype=np.float32)
    out = _infer(loaded, "add_batched", {"INPUT0": a}, ["OUTPUT0"])
    np.testing.assert_allclose(out["OUTPUT0"], a + 1)


def test_busy_compute_returns_tanh(loaded):
    a = np.linspace(-2, 2, 64, dtype=np.float32).reshape(1, 64)
    out = _infer(loaded, "busy_compute", {"INPUT0": a}, ["OUTPUT0"])
    np.testing.assert_allclose(out["OUTPUT0"], np.tanh(a), rtol=1e-6)
