"""Operator tokens: a staff user's token in no tenant. It reads the fleet endpoints, acts in no tenant
(a tenant's object is a 404 to it, even the tenants its user belongs to), is refused once revoked or
once its user is no longer staff; only operators make, list and revoke them."""

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(django_user_model, make_member):
    """Staff, and also a member of acme: an operator token must still act in no tenant."""
    user = make_member("acme", "owner", username="operator")
    user.is_staff = True
    user.save()
    return user


@pytest.fixture
def fleet(make_cluster, make_pool, make_member):
    from nodepools.services import reconcile

    globex = make_member("globex", "owner").memberships.get().tenant
    pool = make_pool(make_cluster(globex, "west"), name="l4", nodes=1)
    reconcile(pool.pk)
    return pool


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def issue(operator, **fields) -> dict:
    session = APIClient()
    session.force_authenticate(operator)
    response = session.post("/api/v1/operator-tokens/", {"name": "ops", **fields}, format="json")
    assert response.status_code == 201, response.data
    return response.data


def test_an_operator_token_reads_the_fleet_and_acts_in_no_tenant(operator, fleet, make_cluster):
    client = bearer(issue(operator)["token"])
    response = client.get("/api/v1/fleet/")
    assert response.status_code == 200
    by_name = {row["name"]: row for row in response.data["tenants"]}
    assert by_name["Globex"]["clusters"] == 1 and by_name["Globex"]["gpus"] == 4
    assert response.data["failing_nodes_count"] == 0
    assert client.get("/api/v1/fleet-rollouts/").status_code == 200
    # Another tenant's objects, and its own user's tenant's: 404, as for a tenant that is not its own
    acme_cluster = make_cluster(operator.memberships.get().tenant, "own")
    for path in (f"/api/v1/clusters/{fleet.cluster.pk}/", f"/api/v1/clusters/{acme_cluster.pk}/"):
        assert client.get(path).status_code == 404
        assert client.delete(path).status_code == 404
    listing = client.get("/api/v1/clusters/")
    assert listing.status_code == 403 and "operator token" in listing.data["message"]


def test_a_revoked_operator_token_is_401(operator):
    created = issue(operator)
    client = bearer(created["token"])
    assert client.get("/api/v1/fleet/").status_code == 200
    assert client.delete(f"/api/v1/operator-tokens/{created['id']}/").status_code == 204
    assert client.get("/api/v1/fleet/").status_code == 401


def test_it_ends_with_its_users_staff_flag(operator):
    client = bearer(issue(operator)["token"])
    operator.is_staff = False
    operator.save()
    assert client.get("/api/v1/fleet/").status_code == 401


def test_only_operators_make_and_see_operator_tokens(operator, owner, client_for):
    issue(operator)
    for client in (client_for(owner), client_for(owner, token=True)):
        assert client.get("/api/v1/operator-tokens/").status_code == 403
        assert client.post("/api/v1/operator-tokens/", {"name": "x"}, format="json").status_code == 403
        assert client.get("/api/v1/fleet/").status_code == 403


def test_a_staff_users_tenant_token_does_not_open_the_fleet(operator, client_for):
    client = client_for(operator, token=True)
    assert client.get("/api/v1/clusters/").status_code == 200
    assert client.get("/api/v1/fleet/").status_code == 403
    assert client.get("/api/v1/fleet-rollouts/").status_code == 403


def test_a_read_only_operator_token_cannot_write(operator):
    client = bearer(issue(operator, scope="read-only")["token"])
    assert client.get("/api/v1/operator-tokens/").status_code == 200
    response = client.post("/api/v1/operator-tokens/", {"name": "more"}, format="json")
    assert response.status_code == 403 and "read-only" in response.data["message"]


def test_a_bad_name_is_400_naming_the_field(operator):
    session = APIClient()
    session.force_authenticate(operator)
    response = session.post("/api/v1/operator-tokens/", {"name": "  "}, format="json")
    assert response.status_code == 400 and "name" in response.data["details"]["fields"]
