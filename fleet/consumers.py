"""The fleet overview's websocket (static/js/fleet.js); rollouts have their own
(rollouts/consumers.py). No Triton calls here: the pollers publish, this only relays
(``registry.relay.RelayConsumer`` checks the user, joins, sends the first message and relays).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from registry import server_access
from registry.relay import NotFound, RelayConsumer
from repository_app import events

from . import overview


class FleetConsumer(RelayConsumer):
    """`/ws/fleet/?label=NAME=VALUE...`: the fleet overview's socket. It joins the
    repository and server groups of every server the page shows (those whose labels match),
    and first sends the saved snapshot of each one a poller watches (an unwatched server's
    snapshot may be old: the page asked it directly)."""

    shown: list[str]

    async def groups_for(self, user: Any) -> list[str]:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        try:
            wanted = overview.parse_filter(query.get("label", []))
        except ValueError:
            raise NotFound("label") from None
        among = await database_sync_to_async(server_access.visible_servers)(user)
        shown = overview.visible(wanted, among)
        self.shown = [s.name for s in shown]
        return [
            group
            for name in self.shown
            for group in (events.repository_group(name), events.server_group(name))
        ]

    async def joined(self, user: Any) -> None:
        for snapshot in await sync_to_async(overview.watched_snapshots)(self.shown):
            await self.send_json({**snapshot, "snapshot": True})
