"""Fail fast, with a clear message, when the test suite's PostgreSQL or Redis is not reachable."""

import os
import socket
import sys
import time
from urllib.parse import urlparse

SERVICES = {
    "PostgreSQL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/nvke"),
    "Redis": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
}


def reachable(url: str, timeout_s: float) -> bool:
    parsed = urlparse(url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((parsed.hostname, parsed.port), timeout=1):
                return True
        except OSError:
            time.sleep(0.5)
    return False


missing = [name for name, url in SERVICES.items() if not reachable(url, 20)]
if missing:
    sys.exit(
        f"Not reachable: {', '.join(missing)}. The tests need PostgreSQL (DATABASE_URL) and Redis "
        "(REDIS_URL); .ci/run starts local ones, docs/operations.md says how."
    )
