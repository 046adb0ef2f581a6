import pytest
from django.test import Client

# Browser fixtures (Playwright + Debian's Chromium on a live daphne): see browser.py.
from .browser import browser_context_factory, owner_page, page  # noqa: F401


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so browser fixtures can tell a failure at teardown."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
