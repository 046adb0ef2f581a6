import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")
django_app = get_asgi_application()  # sets Django up before the consumers are imported

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from nvke.routing import websocket_urlpatterns  # noqa: E402
from nvke.websocket_auth import AnonymousHandshakeLimit, TokenAuthMiddleware  # noqa: E402
from telemetry import embedded  # noqa: E402
from telemetry.intake import Intake  # noqa: E402

if settings.EMBEDDED:  # no beat, no simulator process: this process plays the fleet's telemetry
    embedded.start()

application = ProtocolTypeRouter(
    {
        # The agents' per-second batches skip Django's stack (telemetry/intake.py).
        "http": Intake(django_app),
        # Handshakes with an API token skip the Origin check and the session; see nvke/websocket_auth.py.
        "websocket": TokenAuthMiddleware(
            token_app=URLRouter(websocket_urlpatterns),
            session_app=AllowedHostsOriginValidator(
                AuthMiddlewareStack(AnonymousHandshakeLimit(URLRouter(websocket_urlpatterns)))
            ),
        ),
    }
)
