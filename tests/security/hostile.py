"""Hostile API servers on 127.0.0.1, as a tenant who wants to hold NVKE's workers would run them: one
answers 503 with `Retry-After: 21600` to everything, one accepts and never answers, one trickles its
body a byte at a time, one redirects to another address. Each counts the requests it got."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:
        pass

    def do_GET(self) -> None:
        server: HostileServer = self.server.owner  # type: ignore[attr-defined]
        server.requests += 1
        getattr(self, f"_{server.behaviour}")()

    do_POST = do_GET

    def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _retry_after(self) -> None:
        self._send(503, b'{"message": "busy"}', {"Retry-After": "21600", "Content-Type": "application/json"})

    def _stall(self) -> None:
        self.server.owner.closing.wait(120)  # type: ignore[attr-defined]

    def _trickle(self) -> None:
        body = b'{"kind": "NodeList", "items": [], "metadata": {"resourceVersion": "1"}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body) * 100))
        self.end_headers()
        closing = self.server.owner.closing  # type: ignore[attr-defined]
        while not closing.wait(0.2):
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return

    def _redirect(self) -> None:
        target = self.server.owner.target  # type: ignore[attr-defined]
        self._send(302, b"", {"Location": f"{target}{self.path}"})

    def _internal(self) -> None:
        body = b'{"kind": "Status", "message": "internal-secret-42"}'
        self._send(200, body, {"Content-Type": "application/json"})


class HostileServer:
    def __init__(self, behaviour: str, target: str = "") -> None:
        self.behaviour, self.target, self.requests = behaviour, target, 0
        self.closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.owner = self  # type: ignore[attr-defined]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "HostileServer":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def elapsed(fn) -> tuple[float, object]:
    """(seconds fn took, what it raised or returned)."""
    start = time.monotonic()
    try:
        result = fn()
    except Exception as error:  # the caller asserts on what came back
        result = error
    return time.monotonic() - start, result
