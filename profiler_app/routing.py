from django.urls import path

from .consumers import SweepConsumer

websocket_urlpatterns = [
    path("ws/sweeps/<int:pk>/", SweepConsumer.as_asgi()),
]
