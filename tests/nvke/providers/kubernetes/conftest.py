import pytest

from nvke.tenancy.context import TenantContext


@pytest.fixture
def context(owner):
    membership = owner.memberships.get()
    return TenantContext(membership.tenant, membership.role)
