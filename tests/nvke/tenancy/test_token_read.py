"""A bearer token is read by a query compiled once per process (nvke/tenancy/authentication.py): the
models it gives must be those the ORM's own query gives, with the quota and the role, in one query."""

import datetime

import pytest
from django.db import connection
from django.db.models import OuterRef, Subquery
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nvke.tenancy.authentication import active_token
from nvke.tenancy.models import ApiToken, Membership, Quota, hash_token

pytestmark = pytest.mark.django_db


def orm_token(raw: str) -> ApiToken:
    role = Membership.objects.filter(user_id=OuterRef("user_id"), tenant_id=OuterRef("tenant_id"))
    return (
        ApiToken.objects.select_related("user", "tenant__quota")
        .annotate(member_role=Subquery(role.values("role")[:1]))
        .get(key_hash=hash_token(raw))
    )


def fields(instance) -> dict:
    return {field.attname: getattr(instance, field.attname) for field in instance._meta.concrete_fields}


@pytest.mark.parametrize("with_quota", [False, True])
def test_a_token_reads_as_the_orm_reads_it_in_one_query(owner, with_quota):
    tenant = owner.memberships.get().tenant
    if with_quota:
        Quota.objects.create(tenant=tenant, max_clusters=3)
    token, raw = ApiToken.issue(
        tenant=tenant, user=owner, name="ci", expires_at=timezone.now() + datetime.timedelta(days=1)
    )
    with CaptureQueriesContext(connection) as captured:
        read = active_token(raw)
        quota = getattr(read.tenant, "quota", None)
        role, user, tenant_name = read.member_role, read.user.username, read.tenant.name
    expected = orm_token(raw)
    assert len(captured.captured_queries) == 2  # the read, and the first use's last_used_at
    assert fields(read) | {"last_used_at": None} == fields(expected) | {"last_used_at": None}
    assert fields(read.user) == fields(expected.user) and user == owner.username
    assert fields(read.tenant) == fields(expected.tenant) and tenant_name == tenant.name
    assert (quota and fields(quota)) == (
        getattr(expected.tenant, "quota", None) and fields(expected.tenant.quota)
    )
    assert (quota is not None) == with_quota and role == expected.member_role == "owner"
    assert read._state.db == "default" and not read._state.adding


def test_a_token_of_a_former_member_has_no_role_and_a_wrong_key_no_token(owner):
    membership = owner.memberships.get()
    _, raw = ApiToken.issue(tenant=membership.tenant, user=owner, name="ci")
    membership.delete()
    assert active_token(raw).member_role is None
    assert active_token(raw[:-1] + ("x" if raw[-1] != "x" else "y")) is None
