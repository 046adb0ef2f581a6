"""Secrets at rest, and production settings: CORS closed, secure cookies, `check --deploy`."""

import subprocess
import sys

import pytest
from cryptography.fernet import Fernet
from django.db import connection

from nvke import encryption
from tests.integration.processes import ROOT, process_env


@pytest.fixture
def key(monkeypatch):
    """A fresh NVKE_ENCRYPTION_KEY for the test (the key is read once per process otherwise)."""

    def use(value: str | None):
        if value is None:
            monkeypatch.delenv("NVKE_ENCRYPTION_KEY", raising=False)
        else:
            monkeypatch.setenv("NVKE_ENCRYPTION_KEY", value)
        encryption._fernet.cache_clear()

    yield use
    encryption._fernet.cache_clear()


@pytest.mark.django_db
def test_encrypted_field_stores_only_ciphertext(key):
    key(Fernet.generate_key().decode())
    field = encryption.EncryptedTextField()
    kubeconfig = "apiVersion: v1\nusers:\n- user: {token: s3cr3t-bearer}\n"
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE secret_probe (value text)")
        cursor.execute("INSERT INTO secret_probe VALUES (%s)", [field.get_prep_value(kubeconfig)])
        cursor.execute("SELECT value FROM secret_probe")
        stored = cursor.fetchone()[0]
    assert "s3cr3t" not in stored and stored.startswith(encryption.MARK)
    assert field.from_db_value(stored, None, connection) == kubeconfig


def test_keys_rotate_and_a_wrong_key_is_an_error(key):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    key(old)
    stored = encryption.encrypt("node-join-token")
    key(f"{new},{old}")  # the new key first: it encrypts, the old one still decrypts
    assert encryption.decrypt(stored) == "node-join-token"
    assert encryption.decrypt(encryption.encrypt("x")) == "x"
    key(new)
    with pytest.raises(ValueError, match="does not decrypt"):
        encryption.decrypt(stored)


def test_without_a_key_a_development_key_is_derived_and_said(key, caplog):
    key(None)
    stored = encryption.encrypt("dev")
    assert encryption.decrypt(stored) == "dev"
    assert "NVKE_ENCRYPTION_KEY is unset" in caplog.text
    assert [m.id for m in encryption.encryption_key_check(None)] == ["nvke.W001"]
    key("not-a-fernet-key")
    assert [m.id for m in encryption.encryption_key_check(None)] == ["nvke.E001"]


@pytest.mark.django_db
def test_cors_is_closed_and_session_cookies_are_http_only(api, client, settings):
    response = api.get("/api/v1/me/", HTTP_ORIGIN="https://evil.example")
    assert response.status_code == 200
    assert not any(h.lower().startswith("access-control-") for h in response.headers)
    preflight = client.options(
        "/api/v1/clusters/", HTTP_ORIGIN="https://evil.example", HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST"
    )
    assert "Access-Control-Allow-Origin" not in preflight.headers
    assert settings.SESSION_COOKIE_HTTPONLY and settings.X_FRAME_OPTIONS == "DENY"


def _production_settings(tmp_path, **extra) -> subprocess.CompletedProcess:
    env = process_env(
        NVKE_SECRET_KEY="y" * 64 + "-production-secret-not-for-real-use",
        NVKE_ALLOWED_HOSTS="nvke.example.com",
        NVKE_SECURE="1",
        NVKE_ENCRYPTION_KEY=Fernet.generate_key().decode(),
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/nvke",
        REDIS_URL="redis://127.0.0.1:6379/0",
        NVKE_DATA_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="nvke.settings",
        **extra,
    )
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; print(json.dumps("
        "[s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT,"
        " s.ALLOWED_HOSTS, s.DEBUG, s.NVKE_TRUST_PROXY]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_production_settings_are_secure(tmp_path):
    result = _production_settings(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '[true, true, 31536000, true, ["nvke.example.com"], false, 1]'


def test_check_deploy_wants_the_encryption_key(tmp_path):
    env = process_env(
        NVKE_SECRET_KEY="z" * 64 + "-production-secret-not-for-real-use",
        NVKE_ALLOWED_HOSTS="nvke.example.com",
        NVKE_SECURE="1",
        NVKE_ENCRYPTION_KEY=None,
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/nvke",
        REDIS_URL="redis://127.0.0.1:6379/0",
        NVKE_DATA_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="nvke.settings",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "nvke.W001" in result.stdout + result.stderr


@pytest.mark.django_db
def test_a_secret_the_key_does_not_decrypt_leaves_its_row_readable_and_its_ciphertext_intact(
    key, api, owner, make_cluster
):
    from clusters.models import Cluster
    from clusters.services import cluster_operations
    from nvke.providers.base import ProviderError

    old = Fernet.generate_key().decode()
    key(old)
    cluster = make_cluster(owner.memberships.get().tenant, "prod")
    token = cluster.admin_token
    key(Fernet.generate_key().decode())  # replaced instead of rotated

    response = api.get("/api/v1/clusters/")
    assert response.status_code == 200 and [c["name"] for c in response.data["results"]] == ["prod"]
    unreadable = Cluster.objects.get(pk=cluster.pk)
    assert unreadable.admin_token == ""
    with pytest.raises(ProviderError) as refused:
        cluster_operations(unreadable)
    assert refused.value.reason == "SecretUndecryptable" and "NVKE_ENCRYPTION_KEY" in refused.value.message
    unreadable.status_message = "saved while the key was wrong"
    unreadable.save()

    key(old)  # the right key back: nothing was lost
    assert Cluster.objects.get(pk=cluster.pk).admin_token == token
