"""Pending reasons with numbers: what a claim needs against the most on offer, and what would help."""

import pytest

from claims.allocation import GpuState, NodeState, Request, fleet
from claims.allocator import create_claim, release_claim, topology_changed
from claims.allocator.shortfall import shortfall
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext


def a10(used_memory=0, guaranteed=0, ceilings=0, mode="time-slicing", budget=2000) -> NodeState:
    gpu = GpuState(0, 23028, memory_used_mib=used_memory, compute_used=guaranteed, ceiling_used=ceilings)
    return NodeState(
        id="n",
        gpu_model="a10",
        sharing_mode=mode,
        gpus=[gpu],
        cpu_milli_total=16000,
        memory_mib_total=65536,
        cpu_milli_used=15000,
        ceiling_budget=budget,
        default_guarantee=100 if budget > 1000 else None,
    )


def test_compute_blocked_by_the_ceiling_budget_suggests_more_oversubscription():
    request = Request("fraction", memory_mib=1024, compute_milli=400)
    text = shortfall(request, [a10(guaranteed=500, ceilings=1800)], fleet.INSUFFICIENT_GPU_COMPUTE)
    assert text.startswith(
        "needs 40% compute (10% guaranteed); the best GPU has 50% free to guarantee and 20%"
    )
    assert text.endswith("or a higher compute_oversubscription_percent on the pool.")


def test_compute_blocked_by_guarantees_does_not():
    request = Request("fraction", memory_mib=1024, compute_milli=400, guaranteed_milli=400)
    text = shortfall(request, [a10(guaranteed=800, ceilings=900)], fleet.INSUFFICIENT_GPU_COMPUTE)
    assert "20% free to guarantee" in text and "oversubscription" not in text


def test_cpu_and_memory_say_the_most_free():
    request = Request("fraction", memory_mib=8192, compute_milli=100, cpu_milli=4000)
    assert shortfall(request, [a10()], fleet.INSUFFICIENT_CPU).startswith(
        "needs 4 CPUs; the most free on a node is 1;"
    )
    assert "the most free on one GPU is 4Gi" in shortfall(
        request, [a10(used_memory=23028 - 4096)], fleet.INSUFFICIENT_GPU_MEMORY
    )


def test_nodes_the_claim_could_never_use_do_not_count():
    whole = Request("whole", gpus=2)
    assert "the most on a node is 1" in shortfall(whole, [a10(mode="exclusive")], fleet.NOT_ENOUGH_GPUS)
    h100_only = Request("whole", gpus=2, allowed_models=frozenset({"h100-sxm5-80gb"}))
    assert "the most on a node is 0" in shortfall(h100_only, [a10(mode="exclusive")], fleet.NOT_ENOUGH_GPUS)
    assert shortfall(Request("fraction", memory_mib=1), [a10()], fleet.WRONG_MODE) == ""


@pytest.mark.django_db
def test_a_reloaded_snapshot_does_not_reuse_the_last_ones_numbers(owner, make_cluster, make_pool):
    """Fleets start their versions again when the inventory reloads: the numbers must follow the new state."""
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "prod")
    reconcile(
        make_pool(cluster, name="f", gpu_model="l4", nodes=1, gpus_per_node=1, sharing_mode="fractional").pk
    )
    context = TenantContext(tenant, "owner")

    def fraction(name, mib):
        return create_claim(context=context, cluster=cluster, name=name, kind="fraction", gpu_memory_mib=mib)

    first = fraction("a", 20480)
    assert "the most free on one GPU is 2.5Gi" in fraction("b", 8192).pending_reason
    release_claim(first)
    topology_changed(cluster.pk)  # every process reloads its inventory
    fraction("c", 16384)
    assert "the most free on one GPU is 6.5Gi" in fraction("d", 8192).pending_reason
