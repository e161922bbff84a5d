from django.urls import path, re_path

from .consumers import LiveConsumer

websocket_urlpatterns = [
    path("ws/repository/", LiveConsumer.as_asgi(), {"topic": "repository"}),
    path("ws/server/", LiveConsumer.as_asgi(), {"topic": "server"}),
    path("ws/activity/", LiveConsumer.as_asgi(), {"topic": "activity"}),
    path("ws/notifications/", LiveConsumer.as_asgi(), {"topic": "notifications"}),
    re_path(r"^ws/editor/(?P<name>[^/]+)/$", LiveConsumer.as_asgi(), {"topic": "editor"}),
    re_path(r"^ws/models/(?P<name>[^/]+)/$", LiveConsumer.as_asgi(), {"topic": "model"}),
]
