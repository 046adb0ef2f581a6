"""The audit log's entry for each claim the allocator moves or takes back on its own (a drain, a failed
GPU, a defragmentation, a resize that needs another GPU): which node it left and where it went (None:
it waits). The allocation rows are written in bulk, which the audit signals do not see."""

from audit.recorder import record
from claims.models import Allocation, Claim


def nodes_of(claim_ids) -> dict[int, str]:
    return dict(Allocation.objects.filter(claim_id__in=claim_ids).values_list("claim_id", "node__name"))


def record_moves(claims: list[Claim], before: dict[int, str]) -> None:
    """One entry per claim whose node changed from `before` (claim id → node name) to now."""
    after = nodes_of([claim.pk for claim in claims])
    for claim in claims:
        if before.get(claim.pk) != after.get(claim.pk):
            record(claim, {"node": [before.get(claim.pk), after.get(claim.pk)]}, tenant_id=claim.tenant_id)
