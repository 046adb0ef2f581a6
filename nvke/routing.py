from django.urls import path

from clusters.consumers import EventsConsumer
from telemetry.consumers import TelemetryConsumer

websocket_urlpatterns = [
    path("ws/events/", EventsConsumer.as_asgi()),
    path("ws/telemetry/", TelemetryConsumer.as_asgi()),
]
