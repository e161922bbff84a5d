"""The base of every websocket consumer: who may listen, which groups, a snapshot, relay.

Clients only listen. A consumer says which groups it joins (``groups_for``) and what a late
joiner gets first (``first_message``); the base checks the user (4401), resolves the
Triton server the socket is about (``?server=NAME`` in its URL, the default server when
absent; an unknown one, or one narrowed to none for this user, is refused with 4404 like an
unknown model: ``server_access.visible``), joins before it
reads (an event published meanwhile is in the snapshot or relayed after it), closes with
4404 for what does not exist, relays each group event as it is, and never decodes what a
client sends. The websocket Origin is checked before any consumer (common.origin).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import server_access, servers
from .servers import Server, UnknownServer


class NotFound(Exception):
    """What the socket's path names does not exist (or may not be named): close with 4404."""


class RelayConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]
    server: Server

    async def resolve_server(self, user: Any) -> Server:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        name = query.get("server", [""])[-1]
        try:
            server = await database_sync_to_async(servers.get)(name) if name else None
        except UnknownServer:
            raise NotFound(name) from None
        server = server or servers.default()
        if self.server_scoped() and not await self.may_see(user, server.name):
            raise NotFound(server.name)
        return server

    def server_scoped(self) -> bool:
        """False for a socket about the user alone (notifications): no server's events."""
        return True

    async def may_see(self, user: Any, server_name: str) -> bool:
        """May ``user`` see the server called ``server_name`` (a removed one: by its name)?"""

        def check() -> bool:
            return server_access.visible(user, server_access.server_named(server_name))

        return await database_sync_to_async(check)()

    async def groups_for(self, user: Any) -> list[str]:
        """The groups this socket joins; NotFound closes it with 4404."""
        raise NotImplementedError

    async def first_message(self, user: Any) -> dict[str, Any] | None:
        """What the client gets before live events (the current state), if anything;
        NotFound closes it with 4404."""
        return None

    async def connect(self) -> None:
        self.groups_joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        try:
            self.server = await self.resolve_server(user)
            self.groups_joined = await self.groups_for(user)
            for group in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
            first = await self.first_message(user)
        except NotFound:
            await self._leave()
            await self.close(code=4404)
            return
        await self.accept()
        await self.joined(user)
        if first is not None:
            await self.send_json(first)

    async def joined(self, user: Any) -> None:
        """After the handshake, before the first message (presence announces itself)."""

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def _leave(self) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = []

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        return None  # clients only listen; what they send is ignored, never decoded

    async def relay(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])
