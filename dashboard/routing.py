"""Websocket routes of every app, in one list; anything else is refused at the handshake
(an unmatched path would otherwise raise inside Channels' router: a 500)."""

from channels.generic.websocket import WebsocketConsumer
from django.urls import re_path

from fleet.routing import websocket_urlpatterns as fleet_ws
from profiler_app.routing import websocket_urlpatterns as profiler_ws
from repository_app.routing import websocket_urlpatterns as repository_ws


class NoSuchSocket(WebsocketConsumer):
    def connect(self) -> None:
        self.close(code=4404)


websocket_urlpatterns = [
    *repository_ws,
    *profiler_ws,
    *fleet_ws,
    re_path(r"", NoSuchSocket.as_asgi()),
]
