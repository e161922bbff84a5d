"""`/ws/rollouts/<id>/`: the rollout as it is first, then each target's change and the end."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from registry.relay import NotFound, RelayConsumer
from repository_app import events

from . import runner


class RolloutConsumer(RelayConsumer):
    @property
    def pk(self) -> int:
        return int(self.scope["url_route"]["kwargs"]["pk"])

    async def groups_for(self, user: Any) -> list[str]:
        return [events.rollout_group(self.pk)]

    async def first_message(self, user: Any) -> dict[str, Any] | None:
        # Read after joining: a change published meanwhile is in this state or relayed after
        # it; the page keys targets by server, so seeing one twice changes nothing.
        data = await database_sync_to_async(runner.snapshot_for)(user, self.pk)
        if data is None:
            raise NotFound(self.pk)
        return {"type": "rollout.snapshot", "snapshot": True, "rollout": data}
