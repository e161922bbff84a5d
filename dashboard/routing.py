"""Websocket routes of every app, in one list."""

from profiler_app.routing import websocket_urlpatterns as profiler_ws
from repository_app.routing import websocket_urlpatterns as repository_ws

websocket_urlpatterns = [*repository_ws, *profiler_ws]
