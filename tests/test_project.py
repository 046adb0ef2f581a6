"""Project-level checks: migrations match the models; production settings pass `check --deploy`; the
production shape (docker-compose.yml) is secure as shipped and refuses to start without its secrets."""

import re
import subprocess
import sys
from io import StringIO

import pytest
import yaml
from cryptography.fernet import Fernet
from django.core.management import call_command

from tests.integration.processes import ROOT, database_url_of_this_run, process_env


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


@pytest.mark.django_db
def test_a_statement_run_again_and_again_is_planned_once_per_connection():
    """PostgreSQL: psycopg prepares a statement its connection has run a few times (server-side binding),
    so later runs skip parsing and planning. NVKE_DB_PREPARED_STATEMENTS=0 keeps Django's defaults."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    query = "SELECT count(*) FROM nodepools_claim WHERE cluster_id = %s"

    def prepared() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return [row[0] for row in cursor.fetchall() if "nodepools_claim" in row[0]]

    with connection.cursor() as cursor:
        for cluster in range(6):
            cursor.execute(query, [cluster])
    assert prepared() == ["SELECT count(*) FROM nodepools_claim WHERE cluster_id = $1"]

    code = (
        "import django; django.setup(); from django.db import connection; "
        "print(connection.settings_dict['OPTIONS'].get('server_side_binding'))"
    )
    off = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=process_env(DATABASE_URL=database_url_of_this_run(), NVKE_DB_PREPARED_STATEMENTS="0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == "None"


def compose_environment() -> dict[str, str]:
    """docker-compose.yml's environment for NVKE's services, as `docker compose` substitutes it: every
    required variable (`${NAME:?…}`) given a value, every defaulted one (`${NAME:-default}`) its default."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    given = {
        "NVKE_SECRET_KEY": "c" * 64 + "-production-secret-not-for-real-use",
        "NVKE_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "NVKE_DB_PASSWORD": "a-generated-password",
    }
    required = set()

    def substitute(match: re.Match) -> str:
        name, kind, default = match[1], match[2], match[3]
        if kind == ":?":
            required.add(name)
            return given[name]
        return default or ""

    env = {
        name: re.sub(r"\$\{(\w+)(?:(:[?-])([^}]*))?\}", substitute, str(value))
        for name, value in compose["x-nvke"]["environment"].items()
    }
    assert required == set(given), "the production shape must demand exactly these secrets"
    postgres = compose["services"]["postgres"]["environment"]
    assert "${NVKE_DB_PASSWORD:?" in postgres["POSTGRES_PASSWORD"], "no fixed PostgreSQL password"
    return env


def test_docker_compose_is_the_secure_production_shape(tmp_path):
    """What `docker compose up` runs passes check --deploy as it is: secure by default (NVKE_SECURE=1),
    its own encryption key, no fixed database password (it once had 5 warnings and a derived key)."""
    env = {**compose_environment(), "NVKE_DATA_DIR": str(tmp_path)}
    assert env["NVKE_SECURE"] == "1"
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=process_env(NVKE_DEV=None, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_compose_publishes_on_loopback_only():
    """NVKE_SECURE=1 trusts the right-most X-Forwarded-For hop as its TLS proxy's: a port published on
    every address would let any client that reaches it name its own address."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert published and all(str(port).startswith("127.0.0.1:") for port in published), published


@pytest.mark.parametrize("missing", ["NVKE_SECRET_KEY", "NVKE_ENCRYPTION_KEY"])
def test_the_production_shape_refuses_to_start_without_its_secrets(tmp_path, missing):
    env = {**compose_environment(), "NVKE_DATA_DIR": str(tmp_path), missing: None}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=process_env(NVKE_DEV=None, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert f"does not start without {missing}" in result.stderr
    assert not (tmp_path / "secret_key").exists()  # no key was generated for it either


def test_the_demo_superuser_is_seeded_only_into_the_embedded_default(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "seed_demo"],
        cwd=ROOT,
        env=process_env(DATABASE_URL=database_url_of_this_run(), NVKE_DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "only for the embedded default" in result.stderr
