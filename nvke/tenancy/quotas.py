"""Per-tenant quotas: the limits (`Quota`, `GpuQuota`) and how a check takes them. Each app counts its
own use where its objects are written: `clusters/quotas.py` (clusters), `claims/quotas.py` (GPUs of a
model in node pools; GPU memory and compute share in claims; the tenant's usage report).

Every check runs inside the transaction that creates or changes the object, before it is saved. Where
the tenant has the limit in question, it locks the tenant's row (`SELECT … FOR UPDATE`) and counts:
concurrent creates of one tenant then take turns, each counting what the others committed, so together
they never pass a limit. A refusal raises `QuotaExceeded` (409, code `quota_exceeded`) naming the quota,
the use and the limit; the caller's transaction rolls back and nothing is half-created.
"""

from typing import NoReturn

from django.db import transaction

from nvke.errors import Conflict

from .models import Quota, Tenant


class QuotaExceeded(Conflict):
    code = "quota_exceeded"


def refuse(quota: str, label: str, used: int, asked: int, limit: int, unit: str = "") -> NoReturn:
    raise QuotaExceeded(
        f"Quota {quota} exceeded: {label}: {used}{unit} in use of {limit}{unit}; this asks for "
        f"{asked}{unit} more.",
        quota=quota,
        used=used,
        requested=asked,
        limit=limit,
    )


def require_transaction() -> None:
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("Quota checks run inside the transaction that writes the object.")


def lock_tenant(tenant: Tenant) -> None:
    """Lock the tenant's row for the rest of the transaction: its quota checks take turns."""
    require_transaction()
    Tenant.objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True).get()


def quota_of(tenant: Tenant) -> Quota | None:
    """The limits, read before locking: a tenant without the limit in question takes no lock at all.
    Only the use must be counted under the lock. A request's tenant comes with its quota already
    (`find_context` joins it into the membership query): reading it there is as fresh as here, since
    the limits are not locked either way, and it saves a round trip per write."""
    require_transaction()
    cached = Tenant.quota.related
    if cached.is_cached(tenant):
        return cached.get_cached_value(tenant)
    return Quota.objects.filter(tenant=tenant).first()
