"""The account pages of the web UI: tokens (secret shown once), members and invitations, audit log."""

import pytest
from django.test import Client

from audit.models import AuditEntry
from nvke.tenancy.models import ApiToken, Invitation, Membership, hash_token

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_new_tokens_secret_is_shown_once_and_works(make_member):
    viewer = make_member("acme", "viewer")
    client = signed_in(viewer)
    page = client.post("/account/tokens/", {"name": "laptop", "scope": "read-only"})
    assert page.status_code == 200
    secret = page.context["secret"]
    token = ApiToken.objects.get(name="laptop")
    assert token.key_hash == hash_token(secret) and token.scope == "read-only" and token.user == viewer
    assert secret.encode() in page.content
    again = client.get("/account/tokens/")
    assert secret.encode() not in again.content and token.key_prefix.encode() in again.content


def test_a_token_with_a_past_expiry_is_refused_next_to_the_field(owner):
    page = signed_in(owner).post(
        "/account/tokens/", {"name": "old", "scope": "read-write", "expires_at": "2001-01-01 00:00"}
    )
    assert page.status_code == 400 and page.context["form"].errors["expires_at"]
    assert not ApiToken.objects.exists()


def test_revoking_from_the_page(owner):
    token, _ = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="ci")
    response = signed_in(owner).post(f"/account/tokens/{token.pk}/revoke/")
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_owner_invites_the_user_accepts_then_role_changes_and_removal(owner, django_user_model):
    newcomer = django_user_model.objects.create_user("newcomer", password="pw-secret-123")
    client = signed_in(owner)
    assert client.post("/account/members/", {"username": "newcomer", "role": "viewer"}).status_code == 302
    assert not Membership.objects.filter(user=newcomer).exists()  # not without their consent
    page = client.get("/account/members/")
    assert b"newcomer" in page.content and b"Invite a member" in page.content and b"Revoke" in page.content

    theirs = signed_in(newcomer)
    assert theirs.get("/").status_code == 403  # no tenant yet: the page points to the invitations
    invitations = theirs.get("/invitations/")
    assert invitations.status_code == 200 and b"Acme" in invitations.content
    invitation = invitations.context["invitations"][0]
    joined = theirs.post(f"/invitations/{invitation.pk}/accept/")
    assert (joined.status_code, joined["Location"]) == (302, "/")
    membership = Membership.objects.get(user=newcomer)
    assert membership.role == "viewer" and theirs.get("/").status_code == 200

    client.post(f"/account/members/{membership.pk}/role/", {"role": "admin"})
    assert Membership.objects.get(pk=membership.pk).role == "admin"
    client.post(f"/account/members/{membership.pk}/remove/")
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_unknown_and_existing_users_get_the_same_answer(owner, django_user_model):
    django_user_model.objects.create_user("usera", password="pw-secret-123")
    texts = []
    for name in ("usera", "ghost"):
        answer = signed_in(owner).post("/account/members/", {"username": name, "role": "member"}, follow=True)
        assert answer.status_code == 200
        texts.append([str(m).replace(name, "NAME") for m in answer.context["messages"]])
    assert texts[0] == texts[1] and len(texts[0]) == 1


def test_a_declined_or_revoked_invitation_adds_nobody(owner, django_user_model):
    usera = django_user_model.objects.create_user("usera", password="pw-secret-123")
    client = signed_in(owner)
    client.post("/account/members/", {"username": "usera", "role": "member"})
    first = Invitation.objects.get()
    assert signed_in(usera).post(f"/invitations/{first.pk}/decline/").status_code == 302
    client.post("/account/members/", {"username": "usera", "role": "member"})
    second = Invitation.objects.get()
    assert client.post(f"/account/invitations/{second.pk}/revoke/").status_code == 302
    assert signed_in(usera).post(f"/invitations/{second.pk}/accept/").status_code == 404
    assert not Membership.objects.filter(user=usera).exists() and not Invitation.objects.exists()


def test_the_last_owner_stays_and_the_page_says_why(owner):
    client = signed_in(owner)
    response = client.post(
        f"/account/members/{owner.memberships.get().pk}/role/", {"role": "viewer"}, follow=True
    )
    assert b"A tenant keeps at least one owner." in response.content
    assert owner.memberships.get().role == "owner"


def test_members_see_the_list_without_controls_and_no_audit_log(make_member):
    member = make_member("acme", "member")
    client = signed_in(member)
    page = client.get("/account/members/")
    assert (
        page.status_code == 200
        and b"Invite a member" not in page.content
        and b"Audit log" not in page.content
    )
    assert client.get("/account/audit/").status_code == 403


def test_admins_read_the_audit_log(make_member):
    admin = make_member("acme", "admin")
    client = signed_in(admin)
    client.post("/account/tokens/", {"name": "ci", "scope": "read-write"})
    page = client.get("/account/audit/")
    assert page.status_code == 200
    entries = list(page.context["page"])
    assert entries and all(e.tenant_id == admin.memberships.get().tenant_id for e in entries)
    assert b"tenancy.apitoken" in page.content and b"[secret]" in page.content
    filtered = client.get("/account/audit/", {"object_type": "tenancy.membership"})
    assert {e.object_type for e in filtered.context["page"]} == {"tenancy.membership"}
    assert AuditEntry.objects.filter(object_type="tenancy.apitoken", actor=admin.username).exists()
