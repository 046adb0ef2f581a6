"""Training-aware deferral: what a pool's deferral policy waits for before an upgrade drains a node —
claims on it marked training or running long, or the whole pool while its GPUs are busier than the
policy allows (the machine holds such a node in wait-for-jobs up to the policy's deadline)."""

import datetime

from django.db.models import Q

from claims.models import Allocation
from nodepools.models import Node, NodePool

from .models import UpgradeDeferral

FRESH = datetime.timedelta(minutes=3)  # an older utilization summary says nothing: telemetry stopped


def policy_of(pool_id: int) -> UpgradeDeferral | None:
    return UpgradeDeferral.objects.filter(pool_id=pool_id).first()


def _busy_pool(pool_id: int, policy: UpgradeDeferral, now: datetime.datetime) -> str:
    """In words, why the whole pool waits for its GPUs to calm down; empty when it does not."""
    if policy.utilization_above_percent is None:
        return ""
    utilization, at = NodePool.objects.filter(pk=pool_id).values_list(
        "gpu_utilization", "gpu_utilization_at"
    )[0]
    if (
        utilization is None
        or at is None
        or now - at > FRESH
        or utilization <= policy.utilization_above_percent
    ):
        return ""
    limit = policy.utilization_above_percent
    return f"the pool's GPU utilization ({utilization:.0f}% over the last minute) to drop to {limit}%"


def holding(pool_id: int, policy: UpgradeDeferral | None, now: datetime.datetime) -> dict[str, str]:
    """Node name → what the policy waits for on it, in words ("training claim ml/train to end")."""
    if policy is None:
        return {}
    if busy := _busy_pool(pool_id, policy, now):
        return dict.fromkeys(Node.objects.filter(pool_id=pool_id).values_list("name", flat=True), busy)
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
        held.setdefault(node, f"{'training ' if training else ''}claim {namespace}/{name} to end")
    return held
