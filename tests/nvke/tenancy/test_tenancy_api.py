"""Isolation, roles and tokens across the tenant-owned API routes."""

import datetime

import pytest
from django.utils import timezone

from nvke.tenancy.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def foreign(make_member, make_cluster, make_pool):
    """Objects of tenant 'globex', which the tests' users must never see."""
    user = make_member("globex", "owner")
    cluster = make_cluster(user.memberships.get().tenant, "secret")
    pool = make_pool(cluster, name="secret-pool")
    from nodepools.services import reconcile

    reconcile(pool.pk)
    return {"cluster": cluster, "pool": pool, "node": pool.nodes.first()}


def test_another_tenants_objects_are_404_and_unlisted(api, foreign):
    routes = {
        "clusters": foreign["cluster"].pk,
        "node-pools": foreign["pool"].pk,
        "nodes": foreign["node"].pk,
    }
    for route, pk in routes.items():
        assert api.get(f"/api/v1/{route}/").data["count"] == 0
        for method in ("get", "patch", "delete"):
            response = getattr(api, method)(f"/api/v1/{route}/{pk}/")
            assert response.status_code in (404, 405), (route, method)
            if method == "get":
                assert response.status_code == 404
                assert response.data["code"] == "not_found"
    assert foreign["cluster"].__class__.objects.filter(pk=foreign["cluster"].pk, status="running").exists()


def test_pool_in_another_tenants_cluster_is_refused(api, foreign):
    response = api.post(
        "/api/v1/node-pools/",
        {
            "cluster": foreign["cluster"].pk,
            "name": "sneaky",
            "gpu_model": "l4",
            "gpus_per_node": 1,
            "node_count": 1,
            "min_nodes": 0,
            "max_nodes": 1,
            "driver_release": "580.105.08",
        },
    )
    assert response.status_code == 400
    assert response.data["message"].startswith("cluster:")
    assert "does not exist" in response.data["message"]


def test_filter_by_another_tenants_cluster_returns_nothing(api, foreign):
    response = api.get("/api/v1/node-pools/", {"cluster": foreign["cluster"].pk})
    assert response.status_code == 200 and response.data["count"] == 0


@pytest.mark.parametrize("role", ["viewer"])
def test_viewer_reads_but_cannot_write(make_member, client_for, make_cluster, make_pool, role):
    viewer = make_member("acme", role)
    cluster = make_cluster(viewer.memberships.get().tenant, "prod")
    pool = make_pool(cluster)
    client = client_for(viewer)
    assert client.get("/api/v1/clusters/").data["count"] == 1
    assert client.get(f"/api/v1/node-pools/{pool.pk}/").status_code == 200
    writes = [
        client.post(
            "/api/v1/clusters/",
            {"name": "x", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": 1},
        ),
        client.delete(f"/api/v1/clusters/{cluster.pk}/"),
        client.patch(f"/api/v1/node-pools/{pool.pk}/", {"node_count": 3}),
        client.delete(f"/api/v1/node-pools/{pool.pk}/"),
    ]
    for response in writes:
        assert response.status_code == 403
        assert response.data["code"] == "permission_denied"
    pool.refresh_from_db()
    cluster.refresh_from_db()
    assert pool.node_count == 2 and cluster.status == "running"


@pytest.mark.parametrize("role", ["member", "admin", "owner"])
def test_writer_roles_may_create(make_member, client_for, catalog, role):
    user = make_member("acme", role)
    response = client_for(user).post(
        "/api/v1/clusters/",
        {
            "name": "x",
            "kubernetes_version": "1.35",
            "region": "us-east-1",
            "control_plane_nodes": 1,
        },
    )
    assert response.status_code == 201


def test_no_credentials_is_401(client, catalog):
    from rest_framework.test import APIClient

    response = APIClient().get("/api/v1/clusters/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["code"] == "not_authenticated"


def test_user_without_tenant_is_403(client_for, django_user_model):
    lonely = django_user_model.objects.create_user("lonely", password="pw-secret-123")
    response = client_for(lonely).get("/api/v1/clusters/")
    assert response.status_code == 403
    assert response.data["message"] == "You are not a member of any tenant."


def test_token_lifecycle(api, owner, catalog):
    created = api.post("/api/v1/tokens/", {"name": "ci"})
    assert created.status_code == 201
    raw = created.data["token"]
    assert raw.startswith("nvke_") and raw.startswith(created.data["key_prefix"])
    stored = ApiToken.objects.get(pk=created.data["id"])
    assert raw not in (stored.key_hash, stored.key_prefix)  # only the hash is kept
    listed = api.get("/api/v1/tokens/").data["results"]
    assert [t["name"] for t in listed] == ["ci"] and "token" not in listed[0]

    from rest_framework.test import APIClient

    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    me = bearer.get("/api/v1/me/")
    assert me.status_code == 200
    assert (
        me.data["username"] == owner.username and me.data["tenant"] == "Acme" and me.data["role"] == "owner"
    )
    stored.refresh_from_db()
    assert stored.last_used_at is not None

    assert api.delete(f"/api/v1/tokens/{stored.pk}/").status_code == 204
    revoked = bearer.get("/api/v1/me/")
    assert revoked.status_code == 401
    assert revoked.data["message"] == "Invalid, expired or revoked token."


def test_expired_and_wrong_tokens_are_401(owner, catalog):
    from rest_framework.test import APIClient

    tenant = owner.memberships.get().tenant
    token, raw = ApiToken.issue(
        tenant=tenant, user=owner, name="old", expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    for header in (f"Bearer {raw}", "Bearer nvke_not-a-token", "Bearer a b"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        assert client.get("/api/v1/clusters/").status_code == 401


def test_token_acts_only_in_its_tenant(make_member, make_cluster, catalog):
    """A user in two tenants: the token for one never sees the other's clusters."""
    from rest_framework.test import APIClient

    from nvke.tenancy.models import Membership, Tenant

    user = make_member("acme", "owner")
    globex = Tenant.objects.create(name="Globex", slug="globex")
    Membership.objects.create(tenant=globex, user=user, role="viewer")
    make_cluster(globex, "globex-only")
    make_cluster(user.memberships.get(tenant__slug="acme").tenant, "acme-only")
    _, raw = ApiToken.issue(tenant=globex, user=user, name="globex")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert [c["name"] for c in client.get("/api/v1/clusters/").data["results"]] == ["globex-only"]
    # ...and acts with the user's role there (viewer).
    response = client.post(
        "/api/v1/clusters/",
        {"name": "x", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": 1},
    )
    assert response.status_code == 403


@pytest.mark.parametrize("route", ["clusters", "node-pools", "nodes", "claims"])
def test_lists_take_the_same_queries_for_one_object_or_many(api, owner, make_cluster, make_pool, route):
    """No N+1: a list costs the same number of queries whatever its length."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from claims.allocator import create_claim
    from nodepools.services import reconcile
    from nvke.tenancy.context import TenantContext

    tenant = owner.memberships.get().tenant

    def grow(n):
        cluster = make_cluster(tenant, f"c{n}")
        pool = make_pool(cluster, name="p", sharing_mode="fractional")
        reconcile(pool.pk)
        create_claim(
            context=TenantContext(tenant, "owner"),
            cluster=cluster,
            name="x",
            kind="fraction",
            compute_percent=10,
        )

    grow(1)
    with CaptureQueriesContext(connection) as one:
        assert api.get(f"/api/v1/{route}/").status_code == 200
    grow(2)
    grow(3)
    with CaptureQueriesContext(connection) as many:
        assert api.get(f"/api/v1/{route}/").data["count"] > 1
    assert len(many) == len(one), [q["sql"][:120] for q in many]
