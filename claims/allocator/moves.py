"""The audit log's entry for each claim the allocator moves or takes back on its own (a drain, a failed
GPU, a defragmentation, a resize that needs another GPU): which node it left and where it went (None:
it waits), and, when the move changed them, the GPU model and the isolation it holds — a move from an
MPS L4 onto a time-slicing A10 is a different claim to its workload, and says so. The allocation rows
are written in bulk, which the audit signals do not see."""

from typing import NamedTuple

from audit.recorder import record
from claims.models import Allocation, Claim


class Where(NamedTuple):
    node: str
    gpu_model: str
    isolation: str


def nodes_of(claim_ids) -> dict[int, Where]:
    """Where each placed claim of `claim_ids` is: node, GPU model (its name in words), isolation."""
    rows = Allocation.objects.filter(claim_id__in=claim_ids).values_list(
        "claim_id", "node__name", "node__pool__gpu_model__display_name", "isolation"
    )
    return {claim_id: Where(node, model, isolation) for claim_id, node, model, isolation in rows}


def move_changes(before: Where | None, after: Where | None) -> dict[str, list]:
    """The audit entry's changes of one claim: {} when it stayed where it was."""
    if (before and before.node) == (after and after.node):
        return {}
    changes: dict[str, list] = {"node": [before and before.node, after and after.node]}
    if before and after:
        for field in ("gpu_model", "isolation"):
            if getattr(before, field) != getattr(after, field):
                changes[field] = [getattr(before, field), getattr(after, field)]
    return changes


def record_moves(claims: list[Claim], before: dict[int, Where]) -> None:
    """One entry per claim whose node changed from `before` (from `nodes_of`) to now."""
    after = nodes_of([claim.pk for claim in claims])
    for claim in claims:
        changes = move_changes(before.get(claim.pk), after.get(claim.pk))
        if changes:
            record(claim, changes, tenant_id=claim.tenant_id)
