import pytest
import redis
from django.conf import settings

from nvke.celery import app as celery_app

from .processes import BIN, Process, free_port, port_open, process_env, test_database_url


@pytest.fixture
def celery_worker_process(transactional_db):
    """A real `celery worker` process on the Redis broker, working on this test's database.
    While it runs, tasks sent by the test go over Redis instead of running in the test process."""
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    worker = Process(
        [
            str(BIN / "celery"),
            "-A",
            "nvke",
            "worker",
            "-Q",
            "default,provisioning",
            "-P",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
        ],
        process_env(DATABASE_URL=test_database_url(), REDIS_URL=settings.REDIS_URL),
    )
    celery_app.conf.task_always_eager = False
    try:
        worker.wait_for_line("ready.")
        yield worker
    finally:
        celery_app.conf.task_always_eager = True
        worker.stop()


@pytest.fixture
def asgi_server(transactional_db):
    """A real daphne process serving the app (HTTP and websockets) on this test's database and Redis."""
    port = free_port()
    server = Process(
        [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "nvke.asgi:application"],
        process_env(DATABASE_URL=test_database_url(), REDIS_URL=settings.REDIS_URL),
    )
    try:
        server.wait_for(lambda: port_open(port), f"daphne listening on {port}")
        server.port = port
        yield server
    finally:
        server.stop()
