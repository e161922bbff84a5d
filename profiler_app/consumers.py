"""`/ws/sweeps/<id>/`: all points so far first, then every event of the sweep's group."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from repository_app import events
from repository_app.relay import NotFound, RelayConsumer

from . import sweeps


class SweepConsumer(RelayConsumer):
    @property
    def pk(self) -> int:
        return int(self.scope["url_route"]["kwargs"]["pk"])

    async def groups_for(self, user: Any) -> list[str]:
        return [events.sweep_group(self.pk)]

    async def first_message(self, user: Any) -> dict[str, Any] | None:
        # Read after joining: the client keys points by level/window, so an event published
        # meanwhile is either in the snapshot or relayed after it, never lost or doubled.
        data = await database_sync_to_async(sweeps.snapshot)(self.pk)
        if data is None:
            raise NotFound(self.pk)
        return {"type": "sweep.snapshot", "snapshot": True, **data}
