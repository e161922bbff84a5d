"""ASGI entry point: Django for HTTP, Channels for websockets (served by Daphne)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
# Build the Django app first: it sets up the app registry the routing imports need.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from common.origin import SameOriginValidator  # noqa: E402
from repository_app.uploads.chunk_asgi import chunk_app, is_chunk_request  # noqa: E402

from .routing import websocket_urlpatterns  # noqa: E402


async def http_app(scope, receive, send):  # type: ignore[no-untyped-def]
    # Upload chunks skip Django's request body (a second copy of every byte); see chunk_asgi.
    if is_chunk_request(scope):
        await chunk_app(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


# Same origin only: scheme, host and port of the page must be the handshake's own.
websocket_app = SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
application = ProtocolTypeRouter({"http": http_app, "websocket": websocket_app})
