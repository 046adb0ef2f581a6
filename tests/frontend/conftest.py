import pytest
from django.test import Client

from catalog.models import Architecture, DriverRelease

# Browser fixtures (Playwright + Debian's Chromium on a live uvicorn): see browser.py.
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


@pytest.fixture
def hopper_only_driver(catalog) -> DriverRelease:
    """An offered driver whose branch stops at Hopper: it cannot run a Blackwell B200."""
    driver = DriverRelease.objects.create(
        version="600.10.01", branch=600, branch_type="nfb", cuda_version="13.3"
    )
    driver.architectures.set(Architecture.objects.exclude(name="Blackwell"))
    return driver


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so browser fixtures can tell a failure at teardown."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
