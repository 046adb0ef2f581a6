"""Token scopes, expiry, last use, and the members API."""

import datetime

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from nvke.tenancy.authentication import LAST_USE_RESOLUTION
from nvke.tenancy.models import ApiToken, Membership

pytestmark = pytest.mark.django_db

CLUSTER = {"name": "x", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": 1}


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_read_only_token_reads_but_every_write_is_403(api, catalog):
    created = api.post("/api/v1/tokens/", {"name": "dash", "scope": "read-only"})
    assert created.status_code == 201 and created.data["scope"] == "read-only"
    client = bearer(created.data["token"])
    assert client.get("/api/v1/clusters/").status_code == 200
    for response in (
        client.post("/api/v1/clusters/", CLUSTER),
        client.post("/api/v1/tokens/", {"name": "escalate"}),
        client.delete(f"/api/v1/tokens/{created.data['id']}/"),
    ):
        assert response.status_code == 403
        assert response.data["message"] == "This API token is read-only."
    assert ApiToken.objects.count() == 1 and ApiToken.objects.get().revoked_at is None


def test_read_write_token_writes_with_its_users_role(api, catalog):
    raw = api.post("/api/v1/tokens/", {"name": "ci"}).data["token"]
    response = bearer(raw).post("/api/v1/clusters/", CLUSTER)
    assert response.status_code == 201, response.data


def test_token_expiry_must_be_in_the_future(api):
    past = (timezone.now() - datetime.timedelta(minutes=1)).isoformat()
    response = api.post("/api/v1/tokens/", {"name": "old", "expires_at": past})
    assert response.status_code == 400 and response.data["details"]["field"] == "expires_at"
    assert not ApiToken.objects.exists()


def test_last_use_is_written_at_most_once_a_minute(owner, catalog):
    token, raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="busy")
    client = bearer(raw)
    client.get("/api/v1/me/")
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    client.get("/api/v1/me/")
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first  # within the minute: not rewritten
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - LAST_USE_RESOLUTION)
    client.get("/api/v1/me/")
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first


def test_admins_list_and_revoke_everyones_tokens_members_only_their_own(make_member, client_for):
    admin = make_member("acme", "admin")
    member = make_member("acme", "member")
    tenant = admin.memberships.get().tenant
    theirs, raw = ApiToken.issue(tenant=tenant, user=member, name="member-ci")
    ApiToken.issue(tenant=tenant, user=admin, name="admin-ci")
    assert [t["name"] for t in client_for(member).get("/api/v1/tokens/").data["results"]] == ["member-ci"]
    listed = client_for(admin).get("/api/v1/tokens/").data["results"]
    assert sorted((t["name"], t["user"]) for t in listed) == [
        ("admin-ci", admin.username),
        ("member-ci", member.username),
    ]
    assert client_for(admin).delete(f"/api/v1/tokens/{theirs.pk}/").status_code == 204
    assert bearer(raw).get("/api/v1/me/").status_code == 401


def test_members_api_add_change_remove(make_member, client_for, django_user_model):
    owner = make_member("acme", "owner")
    client = client_for(owner)
    newcomer = django_user_model.objects.create_user("newcomer", password="pw-secret-123")
    added = client.post("/api/v1/members/", {"username": "newcomer", "role": "viewer"})
    assert added.status_code == 201 and added.data["role"] == "viewer"
    assert client.post("/api/v1/members/", {"username": "newcomer", "role": "member"}).status_code == 409
    assert client.post("/api/v1/members/", {"username": "ghost", "role": "member"}).data["code"] == (
        "unknown_user"
    )
    changed = client.patch(f"/api/v1/members/{added.data['id']}/", {"role": "member"})
    assert changed.status_code == 200 and changed.data["role"] == "member"
    _, raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=newcomer, name="theirs")
    assert client.delete(f"/api/v1/members/{added.data['id']}/").status_code == 204
    assert not Membership.objects.filter(user=newcomer).exists()
    assert bearer(raw).get("/api/v1/me/").status_code == 401  # their tokens went with them


def test_only_owners_touch_owners_and_a_tenant_keeps_one(make_member, client_for):
    owner = make_member("acme", "owner")
    admin = make_member("acme", "admin")
    owner_membership = owner.memberships.get()
    admin_client = client_for(admin)
    response = admin_client.patch(f"/api/v1/members/{owner_membership.pk}/", {"role": "viewer"})
    assert response.status_code == 400 and response.data["code"] == "owner_only"
    assert admin_client.delete(f"/api/v1/members/{owner_membership.pk}/").data["code"] == "owner_only"
    response = client_for(owner).patch(f"/api/v1/members/{owner_membership.pk}/", {"role": "admin"})
    assert response.status_code == 409 and response.data["code"] == "last_owner"
    assert Membership.objects.get(pk=owner_membership.pk).role == "owner"


def test_members_and_viewers_cannot_manage_members(make_member, client_for):
    make_member("acme", "owner")
    for role in ("member", "viewer"):
        user = make_member("acme", role)
        client = client_for(user)
        assert client.get("/api/v1/members/").status_code == 200
        assert (
            client.post("/api/v1/members/", {"username": user.username, "role": "owner"}).status_code == 403
        )
        assert (
            client.patch(f"/api/v1/members/{user.memberships.get().pk}/", {"role": "owner"}).status_code
            == 403
        )
    assert Membership.objects.filter(role="owner").count() == 1
