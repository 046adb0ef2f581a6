"""Start real processes (Celery worker, ASGI server) for integration tests, and stop them after."""

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

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
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "nvke.settings", "PYTHONUNBUFFERED": "1"}
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
