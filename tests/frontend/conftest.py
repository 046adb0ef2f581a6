import pytest
from django.test import Client


@pytest.fixture
def tenant(owner):
    return owner.memberships.get().tenant


@pytest.fixture
def ui_for():
    """ui_for(user) -> a browser session signed in as that user."""

    def make(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def ui(owner, ui_for):
    """A browser session signed in as an owner of tenant 'acme'."""
    return ui_for(owner)
