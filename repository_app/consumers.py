"""Websocket consumers of the repository pages: which groups, the saved state, presence.

No Triton calls here: the poller and the control module publish; consumers only relay
(``relay.RelayConsumer`` checks the user, joins, sends the first message and relays).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from registry import server_access
from registry.relay import NotFound, RelayConsumer
from registry.servers import repository_key, with_server
from team import audit

from . import events
from .naming import is_safe_model_name


class LiveConsumer(RelayConsumer):
    """`/ws/repository/`, `/ws/server/`, `/ws/activity/`, `/ws/notifications/`,
    `/ws/models/<name>/` and `/ws/editor/<name>/` (with presence), each about the server its
    URL names (``?server=``; relay.RelayConsumer)."""

    presence_group = ""
    # The activity feed is every server's: events that concern servers or labels hidden from
    # this user (a narrowing to none, as of the handshake) are relayed as their sequence
    # number alone.
    hidden: frozenset[str] = frozenset()

    def server_scoped(self) -> bool:
        return self.topic != "notifications"

    @property
    def topic(self) -> str:
        return str(self.scope["url_route"]["kwargs"].get("topic", "repository"))

    @property
    def model_name(self) -> str | None:
        return self.scope["url_route"]["kwargs"].get("name")

    async def groups_for(self, user: Any) -> list[str]:
        name = self.model_name
        if name is not None and not is_safe_model_name(name):
            raise NotFound(name)
        if self.topic == "notifications":
            return [events.user_group(user.pk)]
        server = self.server.name
        groups = [events.repository_group(server)]
        if self.topic == "server":
            groups.append(events.server_group(server))
        if self.topic == "activity":
            groups.append(events.ACTIVITY_GROUP)
            self.hidden = await sync_to_async(server_access.hidden_concerns)(user)
        if name:
            groups.append(events.model_group(server, name))
            # Saves and editor presence belong to the repository: whoever looks at the model
            # through any server on it sees them.
            key = await sync_to_async(repository_key)(self.server)
            groups.append(events.config_group(key, name))
        return groups

    async def first_message(self, user: Any) -> dict[str, Any] | None:
        if self.topic == "notifications":
            return None
        # A late joiner gets the whole current state first, then live events.
        snapshot = await sync_to_async(events.load_snapshot)(self.server.name)
        return {**snapshot, "snapshot": True} if snapshot else None

    async def joined(self, user: Any) -> None:
        name = self.model_name
        if self.topic == "editor" and name:
            # Presence: everyone on this model's editor learns who else has it open.
            self.presence_group = self.groups_joined[-1]  # its config group
            users = await sync_to_async(events.presence_join)(
                self.presence_group, self.channel_name, user.get_username()
            )
            await sync_to_async(events.publish)(
                self.presence_group, "presence", {"model": name, "users": users}
            )

    async def relay(self, message: dict[str, Any]) -> None:
        event = message["event"]
        if event.get("type") == "activity" and not audit.shown(event, self.hidden):
            # Its seq keeps the client's sequence whole (no resync); nothing else is said.
            gap = {"type": "activity.hidden", "group": event.get("group"), "seq": event.get("seq")}
            await self.send_json(gap)
            return
        if event.get("type") == "config.saved" and event.get("diff_url"):
            # The diff as this page's server shows it (saving._announce_save names none).
            event = {**event, "diff_url": with_server(event["diff_url"], self.server)}
            message = {**message, "event": event}
        await super().relay(message)

    async def disconnect(self, code: int) -> None:
        if self.presence_group:
            group, self.presence_group = self.presence_group, ""
            users = await sync_to_async(events.presence_leave)(group, self.channel_name)
            await sync_to_async(events.publish)(
                group, "presence", {"model": self.model_name, "users": users}
            )
        await super().disconnect(code)
