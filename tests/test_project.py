"""Project-level checks: migrations match the models; production settings pass `check --deploy`."""

import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command

from tests.integration.processes import ROOT, process_env


@pytest.mark.django_db
def test_no_missing_migrations():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    env = process_env(
        NVKE_SECRET_KEY="x" * 64 + "-production-secret-not-for-real-use",
        NVKE_ALLOWED_HOSTS="nvke.example.com",
        NVKE_SECURE="1",
        NVKE_ENCRYPTION_KEY="QUw1dRrKGCXQw7dWN8oX1xaS0M2PZZrVdH6X1mC2b0Y=",  # a test-only Fernet key
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/nvke",
        REDIS_URL="redis://127.0.0.1:6379/0",
        NVKE_DATA_DIR=str(tmp_path),
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_flags_the_embedded_default(tmp_path):
    """Without the production variables the same check fails: the settings really are env-driven."""
    env = process_env(DATABASE_URL=None, REDIS_URL=None, NVKE_DATA_DIR=str(tmp_path), NVKE_SECRET_KEY=None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "security.W004" in result.stderr + result.stdout  # HSTS unset


@pytest.mark.django_db(transaction=True)
def test_postgresql_connections_come_from_a_pool():
    """A request or task that ends gives its connection back; the next borrows an open one instead of
    opening a new connection (a new server process)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's (SQLite opens a file)")

    def borrow_and_give_back() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        connection.close()  # what Django does at the end of every request and task

    borrow_and_give_back()
    assert connection.pool is not None
    opened = connection.pool.get_stats()["connections_num"]
    assert opened >= 1
    for _ in range(5):
        borrow_and_give_back()
    assert connection.pool.get_stats()["connections_num"] == opened
