"""Signing in and out, the shell every page shares, and users in no tenant."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from .helpers import text

pytestmark = pytest.mark.django_db


def test_login_page_has_a_labelled_form():
    response = Client().get("/login/")
    assert response.status_code == 200
    page = text(response)
    assert '<label for="id_username">' in page and 'id="id_username"' in page
    assert '<label for="id_password">' in page and 'type="password"' in page
    assert "csrfmiddlewaretoken" in page


def test_login_with_credentials_lands_on_the_dashboard(owner):
    client = Client()
    response = client.post("/login/", {"username": owner.username, "password": "pw-secret-123"})
    assert response.status_code == 302
    assert response.url == "/"
    assert client.get("/").status_code == 200


def test_wrong_password_shows_an_error_and_signs_nobody_in(owner):
    client = Client()
    response = client.post("/login/", {"username": owner.username, "password": "wrong"})
    assert response.status_code == 200
    assert "enter a correct username and password" in text(response)
    assert client.get("/").status_code == 302


@pytest.mark.parametrize("path", ["/", "/clusters/", "/clusters/new/", "/clusters/1/", "/pools/1/"])
def test_pages_need_a_signed_in_user(path):
    response = Client().get(path)
    assert response.status_code == 302
    assert response.url == f"/login/?next={path}"


def test_logout_is_a_post_and_ends_the_session(ui):
    assert ui.get("/logout/").status_code == 405  # Django 5: no sign-out by link
    response = ui.post("/logout/")
    assert response.status_code == 302 and response.url == "/login/"
    assert ui.get("/").status_code == 302


def test_header_shows_brand_nav_tenant_role_and_sign_out(ui):
    page = text(ui.get("/"))
    assert 'class="brand"' in page and ">NVKE<" in page
    for href in ['href="/"', 'href="/clusters/"', 'href="/api/docs/"']:
        assert href in page
    assert 'href="/admin/"' not in page  # not staff
    assert "Acme" in page and ">owner<" in page
    assert 'action="/logout/"' in page
    assert "/static/frontend/app.css" in page and "/static/frontend/live.js" in page


def test_staff_see_the_admin_link(owner, ui_for):
    owner.is_staff = True
    owner.save()
    assert 'href="/admin/"' in text(ui_for(owner).get("/"))


def test_user_in_no_tenant_gets_a_page_that_says_so(ui_for):
    loner = get_user_model().objects.create_user(username="loner", password="pw-secret-123")
    client = ui_for(loner)
    for path in ["/", "/clusters/"]:
        response = client.get(path)
        assert response.status_code == 403
        assert "You belong to no tenant yet" in text(response)
    assert client.get("/clusters/new/").status_code == 403
