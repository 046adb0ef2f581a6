import gc
import os
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import FileResponse

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")


class SyncStackHandler(ASGIHandler):
    """Django's ASGI handler with the middleware and the view run as one synchronous call in the
    request's thread. Every middleware and view of NVKE is synchronous, and Django's asynchronous
    chain hopped loop -> thread (the middleware) -> loop (the URL resolver) -> thread (the view) and
    back on every request: a third of a cheap read's server time on this machine.

    Each request still has a thread of its own, but the threads are kept for later requests: Django
    started one per request and a second to join it after (~0.15 ms of CPU and ~0.3 ms of wall time
    a request on this machine)."""

    idle_threads_kept = 32  # beyond a burst's worth, a finished request's thread ends

    def __init__(self) -> None:
        super().__init__()
        self.idle_threads: list[ThreadPoolExecutor] = []

    async def __call__(self, scope, receive, send) -> None:
        thread = self.idle_threads.pop() if self.idle_threads else ThreadPoolExecutor(max_workers=1)
        try:
            async with ThreadSensitiveContext(executor=thread):  # Django's own context then is a no-op
                await super().__call__(scope, receive, send)
        finally:
            if len(self.idle_threads) < self.idle_threads_kept:
                self.idle_threads.append(thread)
            else:
                thread.shutdown(wait=False)

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def run_get_response(self, request):
        response = await sync_to_async(self.get_response, thread_sensitive=True)(request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):  # the ASGI server chunks: larger blocks, as Django's
            response.block_size = self.chunk_size
        return response


django.setup(set_prefix=False)  # before the consumers are imported, as get_asgi_application() does
django_app = SyncStackHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import get_resolver  # noqa: E402

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

# What is loaded by now lives as long as the process (Django, and the URL conf with every view and
# serializer it imports, loaded here rather than on the first request): frozen out of the cyclic
# collector's way, so a full collection walks only what requests leave behind. A page of nodes/ (50
# nodes, 2,300 shares) set one off every 15 requests or so, each 185-250 ms of the process (the list's
# p99); with the start-up frozen, ~40 ms.
get_resolver().url_patterns  # noqa: B018
gc.collect()
gc.freeze()
