"""Try a model through the API against the real tritonserver: outputs compared with values
computed here, an ensemble's steps in the statistics, a sequence's flags, bad input refused
on its field before anything is sent, Triton's own errors passed on, the role boundary,
and the whole outputs downloadable."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator

import numpy as np
import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import Client
from rest_framework.authtoken.models import Token

from repository_app import events
from team.roles import OPERATOR, VIEWER, set_role
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def loaded(triton) -> Iterator[TritonClient]:
    """add_sub, ensemble_two_step (and so add_batched) and seq_accumulate loaded once for
    the module; what was not loaded before is unloaded after."""
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    wanted = ("add_sub", "add_batched", "ensemble_two_step", "seq_accumulate")
    before = {m: any(s.state == "READY" for s in client.model_states(m)) for m in wanted}
    for model in ("add_sub", "ensemble_two_step", "seq_accumulate"):
        client.load(model)
    yield client
    for model in ("ensemble_two_step", "seq_accumulate", "add_sub", "add_batched"):
        if not before[model]:
            client.unload(model)


def _api(django_user_model, name: str, role: str) -> Client:
    user = django_user_model.objects.create_user(name)
    set_role(user, role)
    return Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")


def _post(api: Client, model: str, body: dict) -> tuple[int, dict]:
    answer = api.post(f"/api/v1/models/{model}/try", body, content_type="application/json")
    return answer.status_code, answer.json()


@pytest.mark.django_db
def test_try_sends_one_request_and_shows_outputs_latency_and_statistics(
    loaded, django_user_model, settings, tmp_path
):
    settings.TRY_RESULTS_DIR = tmp_path / "try"
    api = _api(django_user_model, "otto", OPERATOR)
    a = np.arange(16, dtype=np.float32) * 0.5
    b = np.linspace(-3, 3, 16, dtype=np.float32)
    code, tried = _post(api, "add_sub", {
        "batch": 1,
        "inputs": {"INPUT0": {"mode": "values", "values": " ".join(map(str, a.tolist()))},
                   "INPUT1": {"mode": "values", "values": json.dumps(b.tolist())}},
    })  # fmt: skip
    assert code == 200, tried
    outputs = {o["name"]: o for o in tried["outputs"]}
    assert outputs["OUTPUT0"]["shape"] == [1, 16] and outputs["OUTPUT0"]["datatype"] == "FP32"
    assert np.allclose(outputs["OUTPUT0"]["values"], a + b)
    assert np.allclose(outputs["OUTPUT1"]["values"], a - b)
    assert tried["latency_ms"] > 0
    (stats,) = tried["statistics"]
    assert stats["model"] == "add_sub" and stats["requests"] >= 1 and stats["compute_infer_us"] > 0
    # The copies: Triton's HTTP shape, perf_analyzer's input data without the batch.
    assert "/v2/models/add_sub/infer" in tried["copy"]["curl"]
    assert "grpcclient.InferInput('INPUT0', [1, 16], 'FP32')" in tried["copy"]["python"]
    entry = tried["copy"]["perf_analyzer"]["data"][0]["INPUT0"]
    assert entry["shape"] == [16] and np.allclose(entry["content"], a)
    # The whole output, as .npy and as JSON, for whoever sent it only.
    whole = api.get(f"/api/v1/try-results/{tried['result']}/OUTPUT1")
    assert whole.status_code == 200
    assert np.allclose(np.load(io.BytesIO(b"".join(whole.streaming_content))), (a - b)[None, :])
    as_json = api.get(f"/api/v1/try-results/{tried['result']}/OUTPUT0?as=json")
    document = json.loads(b"".join(as_json.streaming_content))
    assert document["shape"] == [1, 16] and np.allclose(document["data"], a + b)
    other = _api(django_user_model, "olga", OPERATOR)
    assert other.get(f"/api/v1/try-results/{tried['result']}/OUTPUT0").status_code == 404


@pytest.mark.django_db
def test_an_ensemble_shows_each_step_and_a_sequence_sets_its_flags(
    loaded, django_user_model, settings, tmp_path
):
    settings.TRY_RESULTS_DIR = tmp_path / "try"
    api = _api(django_user_model, "otto", OPERATOR)
    code, tried = _post(api, "ensemble_two_step", {
        "inputs": {"INPUT0": {"mode": "values", "values": "[" + ",".join(["1"] * 16) + "]"},
                   "INPUT1": {"mode": "zeros"}},
    })  # fmt: skip
    assert code == 200, tried
    assert tried["outputs"][0]["values"] == [2.0] * 16  # INPUT0 + INPUT1 + 1
    assert [s["model"] for s in tried["statistics"]] == [
        "ensemble_two_step",
        "add_sub",
        "add_batched",
    ]
    # One step of a sequence: START and END set for you, on the correlation id given.
    code, tried = _post(api, "seq_accumulate", {
        "inputs": {"INPUT": {"mode": "values", "values": "41"}},
        "sequence": {"correlation_id": 9001, "start": True, "end": True},
    })  # fmt: skip
    assert code == 200, tried
    assert tried["outputs"][0]["values"] == [41]
    # Without START, the model itself refuses: its words come back as they are.
    code, refused = _post(api, "seq_accumulate", {
        "inputs": {"INPUT": {"mode": "values", "values": "1"}},
        "sequence": {"correlation_id": 9002, "start": False, "end": True},
    })  # fmt: skip
    assert code in (400, 409) and refused["message"]


@pytest.mark.django_db
def test_bad_input_is_refused_before_sending_and_the_role_boundary_holds(
    loaded, django_user_model, settings, tmp_path
):
    settings.TRY_RESULTS_DIR = tmp_path / "try"
    api = _api(django_user_model, "otto", OPERATOR)
    before = loaded.model_statistics("add_sub")
    code, refused = _post(api, "add_sub", {
        "inputs": {"INPUT0": {"mode": "values", "values": "1 2 3"}, "INPUT1": {"mode": "zeros"}},
    })  # fmt: skip
    assert (code, refused["field"]) == (400, "inputs.INPUT0")
    assert refused["message"] == "INPUT0: 3 values given, the shape [1, 16] takes 16"
    code, refused = _post(api, "add_sub", {"inputs": {"INPUT0": {"mode": "zeros"}}})
    assert (code, refused["field"]) == (400, "inputs.INPUT1")
    code, refused = _post(api, "add_sub", {"batch": 99, "inputs": {}})
    assert (code, refused["field"]) == (400, "batch")
    assert loaded.model_statistics("add_sub") == before  # nothing reached Triton
    settings.TRY_MAX_REQUEST_BYTES = 100
    code, refused = _post(api, "add_sub", {
        "inputs": {"INPUT0": {"mode": "zeros"}, "INPUT1": {"mode": "zeros"}},
    })  # fmt: skip
    assert code == 400 and "TRY_MAX_REQUEST_BYTES" in refused["message"]
    settings.TRY_MAX_REQUEST_BYTES = 1 << 20
    settings.TRY_MAX_RESPONSE_BYTES = 1024  # two 16-float outputs fit; 8 of each do not
    code, refused = _post(api, "add_sub", {
        "batch": 8, "inputs": {"INPUT0": {"mode": "zeros"}, "INPUT1": {"mode": "zeros"}},
    })  # fmt: skip
    assert code == 409 and "larger than the limit of 1,024 bytes" in refused["message"]
    # A model Triton does not serve: Triton's own text.
    code, refused = _post(api, "busy_compute_not_here", {"inputs": {}})
    assert code == 409 and "busy_compute_not_here" in refused["message"]
    # A Viewer reads the form's description, and is refused the request itself.
    viewer = _api(django_user_model, "vera", VIEWER)
    described = viewer.get("/api/v1/models/add_sub/try").json()["model"]
    assert [i["name"] for i in described["inputs"]] == ["INPUT0", "INPUT1"]
    assert described["max_batch_size"] == 8
    code, refused = _post(viewer, "add_sub", {"inputs": {}})
    assert code == 403 and "cannot send requests" in refused["message"]


@pytest.mark.django_db
def test_a_decoupled_model_answers_with_every_response_in_order(
    triton, django_user_model, settings, tmp_path
):
    settings.TRY_RESULTS_DIR = tmp_path / "try"
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states("stream_tok"))
    client.load("stream_tok")
    try:
        api = _api(django_user_model, "otto", OPERATOR)
        # The user's own group hears each response as it arrives (the page's socket).
        layer = get_channel_layer()
        listener = async_to_sync(layer.new_channel)()
        otto = django_user_model.objects.get(username="otto")
        async_to_sync(layer.group_add)(events.user_group(otto.pk), listener)
        code, tried = _post(api, "stream_tok", {
            "inputs": {"PROMPT_ID": {"mode": "values", "values": "100"}}, "stream": "s-1",
        })  # fmt: skip
        assert code == 200, tried

        # 30 s only bounds a broken run (the events are sent when each response arrives).
        async def receive() -> dict:
            return await asyncio.wait_for(layer.receive(listener), 30)

        heard = [async_to_sync(receive)()["event"] for _ in range(8)]
        assert [(e["type"], e["stream"], e["index"]) for e in heard] == [
            ("try.response", "s-1", i) for i in range(8)
        ]
        assert [e["outputs"][0]["values"] for e in heard] == [[101 + i] for i in range(8)]
        # RESPONSE_COUNT (8) tokens, 101 to 108, each in its own response, in order of time.
        tokens = [r["outputs"][0]["values"] for r in tried["responses"]]
        assert tokens == [[101 + i] for i in range(8)]
        times = [r["t_ms"] for r in tried["responses"]]
        assert times == sorted(times)
        (stacked,) = tried["outputs"]
        assert stacked["shape"] == [8, 1] and stacked["values"] == list(range(101, 109))
        code, refused = _post(api, "stream_tok", {"inputs": {"PROMPT_ID": {"mode": "zeros"}},
                                                  "stream": "no spaces"})  # fmt: skip
        assert (code, refused["field"]) == (400, "stream")
    finally:
        if not was_ready:
            client.unload("stream_tok")


@pytest.mark.django_db
def test_a_sequence_of_steps_sets_start_and_end_for_you(
    loaded, django_user_model, settings, tmp_path
):
    settings.TRY_RESULTS_DIR = tmp_path / "try"
    api = _api(django_user_model, "otto", OPERATOR)
    code, tried = _post(api, "seq_accumulate", {
        "inputs": {"INPUT": {"mode": "values", "values": "5"}},
        "sequence": {"correlation_id": 9100, "steps": 4},
    })  # fmt: skip
    assert code == 200, tried
    # The running sum of one sequence: START on the first step only, END on the last.
    assert [r["outputs"][0]["values"] for r in tried["responses"]] == [[5], [10], [15], [20]]
    assert tried["outputs"][0]["values"] == [20]
    # Ended: the same id starts afresh.
    code, again = _post(api, "seq_accumulate", {
        "inputs": {"INPUT": {"mode": "values", "values": "1"}},
        "sequence": {"correlation_id": 9100, "steps": 2},
    })  # fmt: skip
    assert [r["outputs"][0]["values"] for r in again["responses"]] == [[1], [2]]
    code, refused = _post(api, "seq_accumulate", {
        "inputs": {"INPUT": {"mode": "values", "values": "1"}}, "sequence": {"steps": 999},
    })  # fmt: skip
    assert (code, refused["field"]) == (400, "sequence.steps")
