"""`/ws/sweeps/<id>/`: all points so far first, then every event of the sweep's group."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import sweeps


class SweepConsumer(AsyncJsonWebsocketConsumer):
    group: str = ""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        pk = int(self.scope["url_route"]["kwargs"]["pk"])
        # Join first, then read: an event published meanwhile is either in the snapshot
        # or relayed after it (the client keys points by level/window, so no duplicates).
        self.group = f"sweep.{pk}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        data = await database_sync_to_async(sweeps.snapshot)(pk)
        if data is None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.close(code=4404)
            return
        await self.accept()
        await self.send_json({"type": "sweep.snapshot", "snapshot": True, **data})

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        return None  # clients only listen

    async def relay(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])
