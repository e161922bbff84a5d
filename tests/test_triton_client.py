"""The Triton client module against the real tritonserver."""

import re

import pytest

from devstack.services import free_port
from triton_api.client import TritonClient, TritonError

pytestmark = pytest.mark.integration


@pytest.fixture()
def client(triton) -> TritonClient:
    return TritonClient(triton.grpc_url, triton.metrics_url, timeout_s=5)


def test_server_info_reports_version_extensions_and_explicit_mode(client):
    info = client.server_info()
    assert info.live and info.ready
    assert info.version == "2.51.0"
    assert "model_repository" in info.extensions
    assert info.control_mode == "explicit"


def test_load_and_unload_change_the_repository_index(client):
    # Other tests may have published (and removed) more versions: Triton keeps reporting
    # versions it once knew as "unloaded", so look at version 1 and at what serves.
    states = client.load("add_sub")
    assert ("1", "READY") in [(s.version, s.state) for s in states]
    assert [s.version for s in states if s.state == "READY"] == ["1"]
    states = client.unload("add_sub")
    assert ("1", "UNAVAILABLE", "unloaded") in [(s.version, s.state, s.reason) for s in states]
    assert not [s for s in states if s.state == "READY"]


def test_a_failing_load_carries_tritons_reason_verbatim(client, failing_model):
    with pytest.raises(TritonError) as caught:
        client.load("fails_initialize")
    assert "deliberate failure in initialize for the tests" in caught.value.message
    assert not caught.value.unreachable
    [state] = client.model_states("fails_initialize")
    assert state.state == "UNAVAILABLE"
    assert "deliberate failure in initialize" in state.reason


def test_a_reload_with_a_broken_config_keeps_the_old_version_ready(client, triton):
    config = triton.repository / "add_batched" / "config.pbtxt"
    original = config.read_text()
    client.load("add_batched")
    try:
        config.write_text(original.replace("TYPE_FP32", "TYPE_NOT_A_TYPE", 1))
        with pytest.raises(TritonError) as caught:
            client.load("add_batched")
        assert "add_batched" in caught.value.message
        assert [s.state for s in client.model_states("add_batched")] == ["READY"]
    finally:
        config.write_text(original)
        client.unload("add_batched")


def test_a_load_with_a_config_override_uses_it_without_touching_disk(client, triton):
    on_disk = (triton.repository / "add_sub" / "config.pbtxt").read_text()
    override = {
        "name": "add_sub",
        "backend": "python",
        "max_batch_size": 4,
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [16]},
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]},
        ],
    }
    try:
        client.load("add_sub", config=override)
        assert client.model_config("add_sub")["max_batch_size"] == 4
        assert (triton.repository / "add_sub" / "config.pbtxt").read_text() == on_disk
    finally:
        client.unload("add_sub")


def test_a_load_that_outlasts_the_timeout_is_awaited_not_sent_twice(triton):
    # 2 s per call, under the model's 4 s initialize: the load outlasts it. The index polls
    # that follow get the same 2 s each, and the wait for READY a generous bound.
    impatient = TritonClient(triton.grpc_url, triton.metrics_url, timeout_s=2, load_timeout_s=300)
    log_before = triton.log.read_text()
    try:
        states = impatient.load("slow_initialize")
        assert [s.state for s in states] == ["READY"]
        new_log = triton.log.read_text()[len(log_before) :]
        assert len(re.findall(r"loading: slow_initialize:1", new_log)) == 1, new_log
    finally:
        impatient.unload("slow_initialize")


def test_statistics_and_metrics_are_read(client):
    client.load("add_sub")
    try:
        [entry] = client.model_statistics("add_sub")
        assert entry["name"] == "add_sub"
        names = {s.name for s in client.metrics()}
        assert "nv_inference_request_success" in names
    finally:
        client.unload("add_sub")


def test_an_unreachable_triton_gives_one_readable_error():
    port = free_port()
    client = TritonClient(f"127.0.0.1:{port}", f"http://127.0.0.1:{free_port()}/metrics")
    for call in (client.server_info, client.repository_index, lambda: client.load("x")):
        with pytest.raises(TritonError) as caught:
            call()
        assert caught.value.message == f"Triton unreachable at 127.0.0.1:{port}"
        assert caught.value.unreachable
    with pytest.raises(TritonError, match="Triton metrics unreachable"):
        client.metrics()
