"""Token scopes, expiry, last use, the members API and invitations."""

import datetime

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from nvke.tenancy.authentication import LAST_USE_RESOLUTION
from nvke.tenancy.models import ApiToken, Invitation, Membership

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


def test_members_join_by_accepting_an_invitation_then_change_and_leave(
    make_member, client_for, django_user_model
):
    owner = make_member("acme", "owner")
    client = client_for(owner)
    newcomer = django_user_model.objects.create_user("newcomer", password="pw-secret-123")
    # Nobody is added without consent: POST members/ is gone, an invitation adds no membership.
    assert client.post("/api/v1/members/", {"username": "newcomer", "role": "viewer"}).status_code == 405
    invited = client.post("/api/v1/invitations/", {"username": "newcomer", "role": "viewer"})
    assert invited.status_code == 201 and invited.data["invited_by"] == owner.username
    assert not Membership.objects.filter(user=newcomer).exists()
    again = client.post("/api/v1/invitations/", {"username": "newcomer", "role": "member"})
    assert (again.status_code, again.data["code"], again.data["details"]["field"]) == (
        409,
        "duplicate",
        "username",
    )

    invitee = client_for(newcomer)  # in no tenant yet: the invitation is how they get one
    mine = invitee.get("/api/v1/me/invitations/").data["results"]
    assert [(i["tenant"], i["role"], i["invited_by"]) for i in mine] == [("Acme", "viewer", owner.username)]
    joined = invitee.post(f"/api/v1/me/invitations/{mine[0]['id']}/accept/")
    assert joined.status_code == 200 and joined.data == {
        "id": owner.memberships.get().tenant_id,
        "name": "Acme",
        "role": "viewer",
    }
    assert invitee.get("/api/v1/me/invitations/").data["results"] == []  # used up
    assert invitee.post(f"/api/v1/me/invitations/{mine[0]['id']}/accept/").status_code == 404
    membership = Membership.objects.get(user=newcomer)
    assert membership.role == "viewer"
    already = client.post("/api/v1/invitations/", {"username": "newcomer", "role": "member"})
    assert (already.status_code, already.data["code"]) == (409, "duplicate")

    changed = client.patch(f"/api/v1/members/{membership.pk}/", {"role": "member"})
    assert changed.status_code == 200 and changed.data["role"] == "member"
    _, raw = ApiToken.issue(tenant=membership.tenant, user=newcomer, name="theirs")
    assert client.delete(f"/api/v1/members/{membership.pk}/").status_code == 204
    assert not Membership.objects.filter(user=newcomer).exists()
    assert bearer(raw).get("/api/v1/me/").status_code == 401  # their tokens went with them


def test_inviting_tells_nothing_about_which_usernames_exist(make_member, client_for, django_user_model):
    client = client_for(make_member("acme", "owner"))
    django_user_model.objects.create_user("usera", password="pw-secret-123")
    answers = [
        client.post("/api/v1/invitations/", {"username": name, "role": "viewer"})
        for name in ("usera", "ghost")
    ]
    assert [a.status_code for a in answers] == [201, 201]
    shapes = [
        {k: v for k, v in a.data.items() if k not in ("id", "username", "created_at", "expires_at")}
        for a in answers
    ]
    assert shapes[0] == shapes[1]
    listed = client.get("/api/v1/invitations/").data["results"]
    assert sorted(i["username"] for i in listed) == ["ghost", "usera"]


def test_only_the_named_user_sees_declines_or_accepts(make_member, client_for, django_user_model):
    owner = make_member("acme", "owner")
    invitation = client_for(owner).post("/api/v1/invitations/", {"username": "usera", "role": "admin"}).data
    usera = django_user_model.objects.create_user("usera", password="pw-secret-123")
    stranger = make_member("globex", "owner")
    url = f"/api/v1/me/invitations/{invitation['id']}/"
    assert client_for(stranger).get(url).status_code == 404
    assert client_for(stranger).post(url + "accept/").status_code == 404
    assert client_for(owner).post(url + "accept/").status_code == 404  # the inviter cannot accept for them
    assert client_for(usera).post(url + "decline/").status_code == 204
    assert client_for(usera).post(url + "accept/").status_code == 404
    assert not Membership.objects.filter(user=usera).exists()


def test_invitations_expire_and_lapse_with_the_senders_rights(
    make_member, client_for, django_user_model, settings
):
    owner = make_member("acme", "owner")
    admin = make_member("acme", "admin")
    usera = django_user_model.objects.create_user("usera", password="pw-secret-123")
    userb = django_user_model.objects.create_user("userb", password="pw-secret-123")
    # An admin cannot invite an owner (only owners grant that role).
    refused = client_for(admin).post("/api/v1/invitations/", {"username": "usera", "role": "owner"})
    assert (refused.status_code, refused.data["code"]) == (400, "owner_only")
    first = client_for(admin).post("/api/v1/invitations/", {"username": "usera", "role": "member"}).data
    Invitation.objects.filter(pk=first["id"]).update(expires_at=timezone.now())
    assert client_for(usera).get("/api/v1/me/invitations/").data["results"] == []
    assert client_for(usera).post(f"/api/v1/me/invitations/{first['id']}/accept/").status_code == 404
    assert client_for(admin).get("/api/v1/invitations/").data["results"] == []
    # An expired one does not block a fresh one.
    second = client_for(admin).post("/api/v1/invitations/", {"username": "usera", "role": "member"})
    assert second.status_code == 201
    for_b = client_for(admin).post("/api/v1/invitations/", {"username": "userb", "role": "member"}).data
    # The admin is demoted: what they sent no longer stands.
    client_for(owner).patch(f"/api/v1/members/{admin.memberships.get().pk}/", {"role": "viewer"})
    lapsed = client_for(userb).post(f"/api/v1/me/invitations/{for_b['id']}/accept/")
    assert (lapsed.status_code, lapsed.data["code"]) == (409, "invitation_withdrawn")
    assert not Membership.objects.filter(user__in=[usera, userb]).exists()
    assert settings.NVKE_INVITATION_TTL_DAYS == 7
    expires = Invitation.objects.get(pk=second.data["id"]).expires_at
    assert abs((expires - timezone.now()) - datetime.timedelta(days=7)) < datetime.timedelta(minutes=1)


def test_a_read_only_token_cannot_accept(make_member, django_user_model, client_for):
    owner = make_member("acme", "owner")
    invitee = make_member("globex", "viewer", username="usera")
    invitation = client_for(owner).post("/api/v1/invitations/", {"username": "usera", "role": "member"}).data
    _, raw = ApiToken.issue(
        tenant=invitee.memberships.get().tenant, user=invitee, name="ro", scope=ApiToken.Scope.READ_ONLY
    )
    assert [i["id"] for i in bearer(raw).get("/api/v1/me/invitations/").data["results"]] == [invitation["id"]]
    assert bearer(raw).post(f"/api/v1/me/invitations/{invitation['id']}/accept/").status_code == 403
    assert invitee.memberships.count() == 1


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
            client.post("/api/v1/invitations/", {"username": user.username, "role": "owner"}).status_code
            == 403
        )
        assert (
            client.patch(f"/api/v1/members/{user.memberships.get().pk}/", {"role": "owner"}).status_code
            == 403
        )
    assert Membership.objects.filter(role="owner").count() == 1


@pytest.mark.parametrize(
    "name",
    [
        "admin\u202egnp.exe",  # RIGHT-TO-LEFT OVERRIDE: lists would show "adminexe.png"
        "ad\u200bmin",  # ZERO WIDTH SPACE: looks like "admin"
        "\u2066alice\u2069",  # isolates
        "bob\x07",
        "bob\u00ad",  # SOFT HYPHEN (Cf)
        "bo b",
    ],
)
def test_a_username_no_account_could_have_is_refused_naming_the_field(make_member, client_for, name):
    client = client_for(make_member("acme", "owner"))
    response = client.post("/api/v1/invitations/", {"username": name, "role": "viewer"})
    assert (response.status_code, response.data["code"]) == (400, "invalid"), response.data
    assert response.data["message"].startswith("username: Enter a valid username")
    assert not Invitation.objects.exists()


def test_a_tenant_has_a_bounded_number_of_open_invitations(make_member, client_for, settings):
    """Invitations were unlimited: each is a row and a line in every list. Past the cap 409, until one
    is revoked or expires."""
    settings.NVKE_MAX_PENDING_INVITATIONS = 3
    owner = make_member("acme", "owner")
    client = client_for(owner)
    sent = [client.post("/api/v1/invitations/", {"username": f"user{i}", "role": "viewer"}) for i in range(4)]
    assert [r.status_code for r in sent] == [201, 201, 201, 409]
    assert (sent[3].data["code"], sent[3].data["details"]["field"]) == ("invitation_limit", "username")
    assert Invitation.objects.count() == 3
    Invitation.objects.filter(username="user0").update(expires_at=timezone.now())  # lapsed: not open
    assert client.post("/api/v1/invitations/", {"username": "user3", "role": "viewer"}).status_code == 201
    other = client_for(make_member("other", "owner"))  # another tenant's cap is its own
    assert other.post("/api/v1/invitations/", {"username": "user9", "role": "viewer"}).status_code == 201
