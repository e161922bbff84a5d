"""Model state changes reach websocket clients: from actions, and from the one poller."""

import time
from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from dashboard.routing import websocket_urlpatterns
from registry import servers
from repository_app import control, events
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

APP = URLRouter(websocket_urlpatterns)
USER = SimpleNamespace(is_authenticated=True)


async def _connect(path: str, user=USER) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(APP, path)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def _until(communicator, predicate, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "no matching event arrived"
        event = await communicator.receive_json_from(timeout=remaining)
        if predicate(event):
            return event


async def test_anonymous_connections_are_refused_at_the_handshake(redis_db):
    communicator = WebsocketCommunicator(APP, "/ws/repository/")
    communicator.scope["user"] = AnonymousUser()
    connected, code = await communicator.connect()
    assert not connected
    assert code == 4401


async def test_a_load_is_announced_then_its_outcome_with_sequence_numbers(triton, redis_db):
    communicator = await _connect("/ws/models/add_sub/")
    try:
        outcome = await sync_to_async(control.run_action, thread_sensitive=False)(
            servers.default(), "load", "add_sub", "tester"
        )
        assert outcome.ok, outcome.message
        action = await _until(
            communicator, lambda e: e["type"] == "model.action" and e["model"] == "add_sub"
        )
        assert action["phase"] == "succeeded"
        assert action["by"] == "tester"
        states = await _until(
            communicator, lambda e: e["type"] == "models.states" and "add_sub" in e["models"]
        )
        assert states["models"]["add_sub"]["state"] == "READY"
        assert states["group"] == "repository.default" and states["seq"] > action["seq"]
    finally:
        await sync_to_async(TritonClient(triton.grpc_url, triton.metrics_url).unload)("add_sub")
        await communicator.disconnect()


async def test_a_failed_load_carries_tritons_reason(triton, redis_db, failing_model):
    communicator = await _connect("/ws/repository/")
    try:
        outcome = await sync_to_async(control.run_action, thread_sensitive=False)(
            servers.default(), "load", "fails_initialize", "tester"
        )
        assert not outcome.ok
        action = await _until(
            communicator,
            lambda e: e["type"] == "model.action" and e["model"] == "fails_initialize",
        )
        assert action["phase"] == "failed"
        assert "deliberate failure in initialize for the tests" in action["message"]
    finally:
        await communicator.disconnect()


async def test_the_poller_publishes_changes_made_outside_the_dashboard(
    triton, celery_worker, redis_db
):
    communicator = await _connect("/ws/repository/")
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    try:
        # Loaded behind the dashboard's back (e.g. by another tool): the poller sees it.
        await sync_to_async(client.load)("busy_compute")
        event = await _until(
            communicator,
            lambda e: (
                e["type"] == "models.states"
                and e.get("full")
                and e["models"].get("busy_compute", {}).get("state") == "READY"
            ),
        )
        assert event["triton"] == {"up": True, "message": ""}
        # A late joiner first gets the whole current state.
        late = await _connect("/ws/repository/")
        snapshot = await late.receive_json_from(timeout=60)
        assert snapshot["snapshot"] is True
        assert snapshot["models"]["busy_compute"]["state"] == "READY"
        await late.disconnect()
        # Statistics are published to the model's own group after an inference.
        watcher = await _connect("/ws/models/busy_compute/")
        await sync_to_async(_infer_busy_compute)(triton.grpc_url)
        stats = await _until(
            watcher,
            lambda e: e["type"] == "model.stats" and e["stats"][0]["inference_count"] >= 1,
        )
        assert stats["model"] == "busy_compute"
        await watcher.disconnect()
    finally:
        await sync_to_async(client.unload)("busy_compute")
        await communicator.disconnect()


def _infer_busy_compute(url: str) -> None:
    import numpy as np
    import tritonclient.grpc as grpcclient

    tensor = grpcclient.InferInput("INPUT0", [1, 64], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 64), dtype=np.float32))
    client = grpcclient.InferenceServerClient(url)
    client.infer("busy_compute", [tensor])
    client.close()


async def test_clients_ignore_what_they_send(redis_db):
    communicator = await _connect("/ws/repository/")
    await communicator.send_to(text_data="not json at all")
    await communicator.send_to(text_data='{"type": "relay", "event": {"forged": true}}')
    # Still connected and relaying (other events, e.g. the poller's, may come first).
    ping = {"model": "ping", "n": 1}  # a declared event type (events.EVENT_FIELDS)
    await sync_to_async(events.publish)(events.repository_group("default"), "model.versions", ping)
    event = await _until(communicator, lambda e: e["type"] == "model.versions" and "n" in e)
    assert event["n"] == 1 and "forged" not in event
    await communicator.disconnect()
