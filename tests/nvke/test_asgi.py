"""The web process's Django handler (nvke/asgi.py): a request runs in a thread of its own, and the
threads are kept for later requests rather than started and joined on every one."""

import asyncio
import threading

from django.http import HttpResponse

from nvke.asgi import SyncStackHandler


def scope(path: str) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }


async def call(app: SyncStackHandler, path: str) -> int:
    messages, received = [], []

    async def receive() -> dict:
        if received:  # the request is whole: wait for a disconnect that never comes
            await asyncio.Event().wait()
        received.append(True)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        messages.append(message)

    await app(scope(path), receive, send)
    return messages[0]["status"]


def test_requests_reuse_threads_and_concurrent_ones_run_apart():
    app = SyncStackHandler()
    threads, both_in = {}, threading.Barrier(2, timeout=5)

    def view(request) -> HttpResponse:
        threads.setdefault(request.path, []).append(threading.get_ident())
        if request.path.startswith("/together"):
            both_in.wait()  # each waits for the other: they must be in two threads at once
        return HttpResponse("ok")

    app.get_response = view

    async def scenario() -> list[int]:
        first = await call(app, "/one")
        second = await call(app, "/one")
        together = await asyncio.gather(call(app, "/together/a"), call(app, "/together/b"))
        return [first, second, *together]

    assert asyncio.run(scenario()) == [200, 200, 200, 200]
    assert threads["/one"][0] == threads["/one"][1] != threading.get_ident()
    assert threads["/together/a"] != threads["/together/b"]
    assert len(app.idle_threads) == 2
