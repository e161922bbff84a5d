"""Websocket consumers: check the user, join the groups, send the saved state, relay.

No Triton calls here: the poller and the control module publish; consumers only relay.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import events
from .naming import is_safe_model_name


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/repository/`, `/ws/server/`, `/ws/activity/`, `/ws/notifications/`,
    `/ws/models/<name>/` and `/ws/editor/<name>/` (with presence)."""

    groups_joined: list[str]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        topic = self.scope["url_route"]["kwargs"].get("topic", "repository")
        name = self.scope["url_route"]["kwargs"].get("name")
        if name is not None and not is_safe_model_name(name):
            await self.close(code=4404)
            return
        self.groups_joined = [events.REPOSITORY_GROUP]
        if topic == "server":
            self.groups_joined.append(events.SERVER_GROUP)
        if topic == "activity":
            self.groups_joined.append(events.ACTIVITY_GROUP)
        if topic == "notifications":
            self.groups_joined = [events.user_group(user.pk)]
        if name:
            self.groups_joined.append(events.model_group(name))
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        if topic == "notifications":
            return
        if topic == "editor" and name:
            # Presence: everyone on this model's editor learns who else has it open.
            self.presence_group = events.model_group(name)
            users = await sync_to_async(events.presence_join)(
                self.presence_group, self.channel_name, user.get_username()
            )
            await sync_to_async(events.publish)(
                self.presence_group, "presence", {"model": name, "users": users}
            )
        # A late joiner gets the whole current state first, then live events.
        snapshot = await sync_to_async(events.load_snapshot)()
        if snapshot:
            await self.send_json({**snapshot, "snapshot": True})

    async def disconnect(self, code: int) -> None:
        group = getattr(self, "presence_group", None)
        if group:
            users = await sync_to_async(events.presence_leave)(group, self.channel_name)
            name = self.scope["url_route"]["kwargs"].get("name")
            await sync_to_async(events.publish)(group, "presence", {"model": name, "users": users})
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        # Clients only listen; anything they send (JSON or not) is ignored, never decoded.
        return None

    async def relay(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])
