"""The registry of per-process caches (nvke.caches): each registered once with its rule, all emptied by
clear_all(); the plain-dict caches' bounds; and the bounds given to caches that had none."""

import time

import pytest

from claims.allocator import inventory
from nvke import caches, ratelimit


@pytest.fixture
def registered():
    """Names registered by the test are taken out again."""
    names = []
    yield names
    for name in names:
        caches._entries.pop(name, None)


def test_a_name_is_registered_once(registered):
    registered.append("test.once")
    caches.register("test.once", "rule", lambda: None)
    with pytest.raises(ValueError, match="already registered"):
        caches.register("test.once", "rule", lambda: None)


def test_clear_all_empties_every_kind_of_cache(registered):
    registered += ["test.lru", "test.full", "test.renewed"]
    lru, full = caches.bounded("test.lru", 2), caches.emptied_when_full("test.full", 2)
    renewed = caches.renewed_every("test.renewed", 60, 10)
    lru["a"], full["a"], renewed.current()["a"] = 1, 1, 1
    assert {"test.lru", "test.full", "test.renewed"} <= {entry.name for entry in caches.entries()}
    caches.clear_all()
    assert not lru and not full and not renewed.current()


def test_a_cache_emptied_when_full_is_emptied_whole():
    cache = caches.EmptiedWhenFull(2)
    cache.put("a", 1), cache.put("b", 2)
    assert cache.put("c", 3) == 3
    assert cache == {"c": 3}


def test_a_renewed_cache_is_replaced_after_its_time_or_past_its_bound(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    cache = caches.RenewedEvery(5, maxsize=2)
    first = cache.current()
    first.update(a=1, b=2)
    clock[0] += 4.9
    assert cache.current() is first
    first["c"] = 3  # past the bound
    assert cache.current() == {}
    cache.current()["a"] = 1
    clock[0] += 5
    assert cache.current() == {}


def test_the_allocator_keeps_the_clusters_loaded_last(monkeypatch):
    monkeypatch.setattr(inventory, "CLUSTERS_KEPT", 2)
    kept: dict[int, str] = {}
    for cluster in (1, 2, 3):
        inventory._newest(kept, cluster, f"snapshot {cluster}")
    assert list(kept) == [2, 3]
    inventory._newest(kept, 2, "reloaded")  # a reload is the newest
    inventory._newest(kept, 4, "snapshot 4")
    assert kept == {2: "reloaded", 4: "snapshot 4"}


def test_in_process_rate_limit_counters_go_with_their_window_and_are_bounded(settings, monkeypatch):
    settings.REDIS_URL = ""
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    for n in range(5):
        ratelimit.hit(f"caller-{n}", 10, 60)
    assert len(ratelimit.MEMORY.counts) == 5
    clock[0] += 121  # past both windows a counter counts in
    ratelimit.hit("caller-0", 10, 60)
    assert len(ratelimit.MEMORY.counts) == 1
    monkeypatch.setattr(ratelimit, "MEMORY", ratelimit._Memory(maxsize=3))
    for n in range(5):
        ratelimit.add_failure(f"address-{n}", 60)
    assert len(ratelimit.MEMORY.counts) == 3


def test_docs_performance_names_every_registered_cache():
    """docs/performance.md's table of per-process caches names each registry entry."""
    import importlib
    from pathlib import Path

    for module in (  # the modules that register caches (the rest are imported by Django's start-up)
        "audit.recorder",
        "claims.allocator.rows",
        "claims.allocator.service",
        "nvke.lookups",
        "nvke.providers.clusterapi.kubeconfig",
        "nvke.providers.clusterapi.management",
        "nvke.providers.kubernetes.operations",
        "nvke.tenancy.authentication",
        "nodepools.api.documents",
        "telemetry.ingest",
        "telemetry.policy",
    ):
        importlib.import_module(module)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text()
    table = docs[docs.index("## Per-process caches") :]
    missing = [entry.name for entry in caches.entries() if f"`{entry.name}`" not in table]
    assert not missing, f"docs/performance.md's per-process caches do not name: {missing}"


@pytest.mark.django_db
def test_a_migration_empties_every_cache(registered):
    """post_migrate (sent by migrate, and by a flush) clears the registry: what the caches hold was read
    from rows and columns a migration may have changed."""
    from django.apps import apps
    from django.db.models.signals import post_migrate

    registered.append("test.migrated")
    cache = caches.emptied_when_full("test.migrated", 10)
    cache.put("a", 1)
    tenancy = apps.get_app_config("tenancy")
    post_migrate.send(
        sender=tenancy,
        app_config=tenancy,
        verbosity=0,
        interactive=False,
        using="default",
        apps=apps,
        plan=[],
    )
    assert not cache
