"""Training-aware deferral: the claims on a pool's nodes its deferral policy waits for before a driver
upgrade drains their node (the machine holds such a node in wait-for-jobs up to the policy's deadline)."""

import datetime

from django.db.models import Q

from nodepools.models import Allocation

from .models import UpgradeDeferral


def policy_of(pool_id: int) -> UpgradeDeferral | None:
    return UpgradeDeferral.objects.filter(pool_id=pool_id).first()


def holding(pool_id: int, policy: UpgradeDeferral | None, now: datetime.datetime) -> dict[str, str]:
    """Node name → the first claim on it the policy waits for, in words."""
    if policy is None:
        return {}
    waited_for = Q()
    if policy.training_claims:
        waited_for |= Q(claim__training=True)
    if policy.claims_older_than_s is not None:
        waited_for |= Q(claim__allocated_at__lte=now - datetime.timedelta(seconds=policy.claims_older_than_s))
    if not waited_for:
        return {}
    rows = (
        Allocation.objects.filter(waited_for, node__pool_id=pool_id)
        .order_by("claim__namespace", "claim__name")
        .values_list("node__name", "claim__namespace", "claim__name", "claim__training")
    )
    held: dict[str, str] = {}
    for node, namespace, name, training in rows:
        held.setdefault(node, f"{'training ' if training else ''}claim {namespace}/{name}")
    return held
