"""Start real processes (Celery worker, ASGI server) for integration tests, and stop them after."""

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url_of_this_run() -> str:
    """The URL of the database this test run uses (pytest-django's test_* database)."""
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def process_env(**overrides: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "nvke.settings",
        "PYTHONUNBUFFERED": "1",
        # the tests' Kubernetes stand-ins listen on loopback, which NVKE's address policy refuses by default
        "NVKE_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
    }
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


class Process:
    """A child process whose output is collected, so a test can wait for a line and show the log."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"process exited ({self.proc.returncode}) before {what}:\n{self.log}")
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}:\n{self.log[-4000:]}")

    def wait_for_line(self, text: str, timeout_s: float = 60) -> None:
        self.wait_for(lambda: text in self.log, f"{text!r} in the output", timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    """Poll a condition with a deadline; fail with `what` when it never holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s: {what}")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def embedded_server(data_dir: Path, **env: str) -> Iterator[tuple[Process, str]]:
    """`scripts/dev serve` on the embedded default (SQLite under data_dir, no DATABASE_URL or REDIS_URL),
    with the demo accounts seeded: (the process, its base URL) once it listens."""
    port = free_port()
    server = Process(
        [str(ROOT / "scripts" / "dev"), "serve"],
        process_env(
            DATABASE_URL=None,
            REDIS_URL=None,
            NVKE_DATA_DIR=str(data_dir),
            PORT=str(port),
            PATH=f"{BIN}:/usr/bin:/bin",
            DJANGO_SETTINGS_MODULE=None,
            **env,
        ),
    )
    try:
        server.wait_for(lambda: port_open(port), "the embedded server to listen", timeout_s=120)
        yield server, f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def demo_session(base: str) -> requests.Session:
    """A session signed in through the login form as the embedded default's demo owner."""
    session = requests.Session()
    login = session.get(f"{base}/login/", timeout=10)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
    signed_in = session.post(
        f"{base}/login/",
        data={"username": "demo", "password": "nvke-demo", "csrfmiddlewaretoken": csrf},
        headers={"Referer": f"{base}/login/"},
        timeout=10,
    )
    assert signed_in.status_code == 200 and signed_in.url == f"{base}/", signed_in.text[-2000:]
    return session
