"""Attach is bounded: a cap on attached clusters per tenant, one attachment per endpoint, one attach of a
tenant in flight at a time, and no database connection held while the tenant's endpoint is called."""

import pytest
from django.core.cache import cache
from django.db import connection

from clusters.models import Cluster
from nvke.providers.kubernetes import attach as attach_checks

pytestmark = pytest.mark.django_db(transaction=True)

ATTACH = "/api/v1/clusters/attach/"


def attach(api, server, name: str, endpoint: str | None = None):
    body = {"name": name, "endpoint": endpoint or server.url, "token": server.token}
    return api.post(ATTACH, {**body, "ca_bundle": server.ca_bundle})


def test_the_same_endpoint_is_attached_once(api, gpu_cluster):
    assert attach(api, gpu_cluster, "first").status_code == 201
    again = attach(api, gpu_cluster, "second", gpu_cluster.url + "/")
    assert again.status_code == 409
    assert (again.json()["code"], again.json()["details"]["field"]) == ("already_attached", "endpoint")
    assert Cluster.objects.filter(attached=True).count() == 1


def test_a_tenant_attaches_up_to_the_cap(api, gpu_cluster, settings):
    settings.NVKE_MAX_ATTACHED_CLUSTERS = 1
    assert attach(api, gpu_cluster, "first").status_code == 201
    gpu_cluster.clear_requests()
    over = attach(api, gpu_cluster, "second", gpu_cluster.url.replace("127.0.0.1", "localhost"))
    assert (over.status_code, over.json()["code"]) == (400, "attached_cluster_limit")
    assert gpu_cluster.requests == [], "refused before the endpoint is called"


def test_one_attach_per_tenant_is_checked_at_a_time(api, gpu_cluster, owner):
    tenant = owner.memberships.get().tenant
    cache.add(f"nvke:attach:{tenant.pk}", 1, timeout=60)  # another request's attach, being checked
    try:
        busy = attach(api, gpu_cluster, "first")
    finally:
        cache.delete(f"nvke:attach:{tenant.pk}")
    assert (busy.status_code, busy.json()["code"]) == (409, "attach_in_progress")
    assert attach(api, gpu_cluster, "first").status_code == 201, "the lock is released after an attach"


def test_no_database_connection_is_held_while_the_endpoint_is_called(api, gpu_cluster, monkeypatch):
    held = []
    inspect = attach_checks.inspect

    def watched(ref):
        held.append(connection.connection is not None)
        return inspect(ref)

    monkeypatch.setattr(attach_checks, "inspect", watched)
    assert attach(api, gpu_cluster, "first").status_code == 201
    assert held == [False]
