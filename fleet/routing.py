from django.urls import path

from .consumers import FleetConsumer
from .rollouts.consumers import RolloutConsumer

websocket_urlpatterns = [
    path("ws/fleet/", FleetConsumer.as_asgi()),
    path("ws/rollouts/<int:pk>/", RolloutConsumer.as_asgi()),
]
