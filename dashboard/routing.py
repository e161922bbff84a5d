"""Websocket routes of every app, in one list."""

from repository_app.routing import websocket_urlpatterns as repository_ws

websocket_urlpatterns = [*repository_ws]
