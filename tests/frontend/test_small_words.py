"""Small things a user sees: a favicon (no 404), "just now" rather than "0 minutes ago"."""

import datetime

import pytest
from django.test import Client
from django.utils import timezone

from frontend.templatetags.nvke_ui import ago


@pytest.mark.django_db
def test_the_favicon_is_served_and_linked(ui):
    response = Client().get("/favicon.ico", follow=True)
    assert response.status_code == 200 and response["Content-Type"].startswith("image/svg+xml")
    assert 'rel="icon" href="/static/frontend/favicon.svg"' in ui.get("/").content.decode()


def test_a_moment_within_the_minute_is_just_now():
    now = timezone.now()
    assert ago(now - datetime.timedelta(seconds=20)) == "just now"
    assert (
        ago(now - datetime.timedelta(minutes=3, seconds=5)) == "3\xa0minutes ago"
    )  # timesince keeps the figure and unit together
