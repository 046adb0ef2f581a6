"""Password guessing: failed sign-ins lock an address out for a while, on the sign-in page and the admin."""

import pytest
from django.core.cache import cache
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counters(settings):
    settings.NVKE_LOGIN_FAILURES_PER_USER = 3
    settings.NVKE_LOGIN_FAILURES_PER_ADDRESS = 5
    cache.clear()
    yield
    cache.clear()


def sign_in(client, username, password, path="/login/"):
    return client.post(path, {"username": username, "password": password})


def test_after_too_many_failures_even_the_right_password_is_refused(owner):
    client = Client()
    for _ in range(3):
        assert sign_in(client, owner.username, "wrong").status_code == 200  # the form, with its error
    refused = sign_in(client, owner.username, "pw-secret-123")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "Too many failed sign-ins" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    # The admin checks passwords through the same backend.
    admin = sign_in(client, owner.username, "pw-secret-123", path="/admin/login/")
    assert "_auth_user_id" not in client.session and admin.status_code == 200


def test_a_success_clears_the_users_count(owner):
    client = Client()
    for _ in range(2):
        sign_in(client, owner.username, "wrong")
    assert sign_in(client, owner.username, "pw-secret-123").status_code == 302
    client.logout()
    for _ in range(2):
        sign_in(client, owner.username, "wrong")
    assert sign_in(client, owner.username, "pw-secret-123").status_code == 302


def test_guessing_many_usernames_locks_the_address(owner):
    client = Client()
    for n in range(5):
        sign_in(client, f"guess{n}", "wrong")
    assert sign_in(client, owner.username, "pw-secret-123").status_code == 429
    # Another address is not affected.
    assert (
        Client(REMOTE_ADDR="10.0.0.9")
        .post("/login/", {"username": owner.username, "password": "pw-secret-123"})
        .status_code
        == 302
    )


def test_a_rotated_x_forwarded_for_does_not_escape_the_lockout(owner, settings):
    """Behind the one proxy, the hops left of the proxy's are the client's own words: rotating them
    must not make each guess come from a new address."""
    settings.NVKE_TRUST_PROXY = 1
    settings.NVKE_TRUSTED_PROXIES = []
    client = Client(REMOTE_ADDR="10.0.0.2")  # the proxy
    for n in range(6):
        forwarded = f"198.51.100.{n}, 127.0.0.1, 203.0.113.50"  # the proxy appended the real peer
        client.post(
            "/login/", {"username": owner.username, "password": "wrong"}, HTTP_X_FORWARDED_FOR=forwarded
        )
    refused = client.post(
        "/login/",
        {"username": owner.username, "password": "pw-secret-123"},
        HTTP_X_FORWARDED_FOR="198.51.100.99, 203.0.113.50",
    )
    assert refused.status_code == 429 and "_auth_user_id" not in client.session
    # Another client behind the same proxy is not locked out.
    other = client.post(
        "/login/",
        {"username": owner.username, "password": "pw-secret-123"},
        HTTP_X_FORWARDED_FOR="203.0.113.51",
    )
    assert other.status_code == 302
