"""Presence on the config editor, "config changed" for its viewers, personal notifications."""

from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from dashboard.routing import websocket_urlpatterns
from registry import servers
from repository_app import events

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
APP = URLRouter(websocket_urlpatterns)


async def _open(path: str, name: str, pk: int = 1) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(APP, path)
    communicator.scope["user"] = SimpleNamespace(
        is_authenticated=True, pk=pk, get_username=lambda: name
    )
    assert (await communicator.connect())[0]
    return communicator


async def _next(communicator, event_type: str) -> dict:
    while True:
        event = await communicator.receive_json_from(timeout=60)
        if event.get("type") == event_type:
            return event


async def test_editors_see_who_else_has_the_config_open(redis_db):
    alice = await _open("/ws/editor/add_sub/", "alice")
    assert (await _next(alice, "presence"))["users"] == ["alice"]
    bob = await _open("/ws/editor/add_sub/", "bob")
    assert (await _next(alice, "presence"))["users"] == ["alice", "bob"]
    await bob.disconnect()
    assert (await _next(alice, "presence"))["users"] == ["alice"]
    await alice.disconnect()
    assert events.presence(events.config_group("", "add_sub")) == []


async def test_a_save_tells_everyone_looking_at_the_model_with_a_diff_link(
    triton, redis_db, admin_user
):
    from repository_app.editor import saving

    viewer = await _open("/ws/models/add_sub/", "viewer")
    path = triton.repository / "add_sub" / "config.pbtxt"
    original = path.read_bytes()
    try:
        server = servers.default()
        current = await sync_to_async(saving.read_current)("add_sub", server)
        await sync_to_async(saving.record_disk_change)("add_sub", server, current)
        text = original.decode().replace("max_batch_size: 8", "max_batch_size: 4")
        await sync_to_async(saving.save_config)(
            "add_sub", text, server=server, base_sha256=current.sha256,
            author_id=admin_user.pk, source="text",
        )  # fmt: skip
        event = await _next(viewer, "config.saved")
        assert event["by"] == admin_user.username and event["model"] == "add_sub"
        assert event["diff_url"].startswith("/models/add_sub/config/diff/?a=")
    finally:
        path.write_bytes(original)
        await viewer.disconnect()


async def test_a_save_through_another_server_links_each_page_to_its_own_server(
    triton, shared_server, redis_db, admin_user
):
    """`shared` serves the same repository: a save through it reaches the pages of both, and
    each page's link names its own server, never the one the save came through (which the
    reader may not see)."""
    from repository_app.editor import saving

    on_default = await _open("/ws/editor/add_sub/", "dee")
    on_shared = await _open("/ws/editor/add_sub/?server=shared", "sha")
    path = triton.repository / "add_sub" / "config.pbtxt"
    original = path.read_bytes()
    try:
        current = await sync_to_async(saving.read_current)("add_sub", shared_server)
        await sync_to_async(saving.record_disk_change)("add_sub", shared_server, current)
        text = original.decode().replace("max_batch_size: 8", "max_batch_size: 4")
        await sync_to_async(saving.save_config)(
            "add_sub", text, server=shared_server, base_sha256=current.sha256,
            author_id=admin_user.pk, source="text",
        )  # fmt: skip
        seen = (await _next(on_default, "config.saved"))["diff_url"]
        assert seen.startswith("/models/add_sub/config/diff/?a=") and "server=" not in seen
        seen = (await _next(on_shared, "config.saved"))["diff_url"]
        assert seen.startswith("/models/add_sub/config/diff/?a=") and seen.endswith(
            "&server=shared"
        )
    finally:
        path.write_bytes(original)
        await on_default.disconnect()
        await on_shared.disconnect()


async def test_notifications_reach_only_their_user(redis_db):
    mine = await _open("/ws/notifications/", "me", pk=41)
    other = await _open("/ws/notifications/", "other", pk=42)
    await sync_to_async(events.notify)(41, "Your sweep #3 of add_sub succeeded.", "/sweeps/3/")
    event = await _next(mine, "notify")
    assert event == {**event, "message": "Your sweep #3 of add_sub succeeded.", "url": "/sweeps/3/"}
    assert await other.receive_nothing(timeout=0.5)
    await mine.disconnect()
    await other.disconnect()


async def test_the_owner_is_told_when_their_sweep_finishes(triton, redis_db, admin_user):
    from channels.layers import get_channel_layer

    from profiler_app import jobs, sweeps
    from profiler_app.params import SweepParams

    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(events.user_group(admin_user.pk), channel)
    sweep = await sync_to_async(sweeps.create_sweep)(
        servers.default(),
        SweepParams(model="add_sub", start=1, end=1),
        user=admin_user,
        enqueue=False,
    )
    assert await sync_to_async(jobs.claim)(sweep.pk)
    await sync_to_async(jobs.finish)(sweep.pk, jobs.Outcome("succeeded"))
    message = await layer.receive(channel)
    assert message["event"]["message"] == f"Your sweep #{sweep.pk} of add_sub succeeded."
    assert message["event"]["url"] == f"/sweeps/{sweep.pk}/"
