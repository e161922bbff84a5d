"""`/ws/sweeps/<id>/`: all points so far first, then every event of the sweep's group (a
sweep on a server hidden from the user is refused at the handshake, 4404)."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from registry.relay import NotFound, RelayConsumer
from repository_app import events

from . import sweep_read
from .models import Sweep


class SweepConsumer(RelayConsumer):
    @property
    def pk(self) -> int:
        return int(self.scope["url_route"]["kwargs"]["pk"])

    def server_scoped(self) -> bool:
        return False  # about the sweep's own server, checked below whatever ?server= says

    async def groups_for(self, user: Any) -> list[str]:
        # A sweep on a server narrowed to none for the user does not exist for them.
        server = await database_sync_to_async(
            lambda: Sweep.objects.filter(pk=self.pk).values_list("server", flat=True).first()
        )()
        if server is not None and not await self.may_see(user, server):
            raise NotFound(self.pk)
        return [events.sweep_group(self.pk)]

    async def first_message(self, user: Any) -> dict[str, Any] | None:
        # Read after joining: the client keys points by level/window, so an event published
        # meanwhile is either in the snapshot or relayed after it, never lost or doubled.
        data = await database_sync_to_async(sweep_read.snapshot)(self.pk)
        if data is None:
            raise NotFound(self.pk)
        return {"type": "sweep.snapshot", "snapshot": True, **data}
