"""allocator.resize_claim: a fraction's compute share changes in place when its GPU has the headroom,
moves to another GPU when it does not, and stays put with the reason when no GPU fits; other processes
follow from the log without reloading their inventory."""

import pytest

from claims.allocator import create_claim, resize_claim
from claims.allocator.inventory import Snapshot
from claims.allocator.locks import allocation_lock
from claims.models import AllocationEvent, Claim, GpuShare
from claims.selectors import allocation_violations
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


@pytest.fixture
def context(owner):
    return TenantContext(owner.memberships.get().tenant, "owner")


@pytest.fixture
def cluster(context, make_cluster, make_pool):
    cluster = make_cluster(context.tenant, "prod")
    pool = make_pool(
        cluster, name="frac", gpu_model="l4", nodes=1, gpus_per_node=2, sharing_mode="fractional"
    )
    reconcile(pool.pk)
    return cluster


def fraction(context, cluster, name: str, percent: int) -> Claim:
    return create_claim(context=context, cluster=cluster, name=name, kind="fraction", compute_percent=percent)


def share_of(claim: Claim) -> GpuShare:
    return GpuShare.objects.select_related("gpu").get(allocation__claim=claim)


def test_grows_in_place_and_another_process_catches_up_without_a_reload(context, cluster):
    small = fraction(context, cluster, "small", 20)
    with allocation_lock(cluster.pk):
        other = Snapshot(cluster.pk)  # another worker's copy, loaded before the resize
    gpu = share_of(small).gpu_id
    resets = AllocationEvent.objects.filter(cluster=cluster, kind=AllocationEvent.Kind.RESET)
    before = resets.count()

    resized = resize_claim(small.pk, compute_percent=60)

    assert (resized.moved, resized.refusal, resized.gpu_before, resized.gpu_after) == (False, "", gpu, gpu)
    assert share_of(small).compute_milli == 600 and Claim.objects.get(pk=small.pk).compute_percent == 60
    assert resets.count() == before
    with allocation_lock(cluster.pk):
        assert other.catch_up()  # a remove and an add, not a reset
        assert other.inventory.placements[small.pk].compute_milli == 600
        node = other.inventory.placements[small.pk].node_id
        assert sum(g.compute_used for g in other.inventory.nodes[node].gpus) == 600
    assert allocation_violations(cluster.pk) == []


def test_moves_to_another_gpu_when_its_own_is_full(context, cluster):
    grower = fraction(context, cluster, "grower", 50)
    neighbour = fraction(context, cluster, "neighbour", 50)  # fills the first GPU with it
    assert share_of(grower).gpu_id == share_of(neighbour).gpu_id

    resized = resize_claim(grower.pk, compute_percent=80)

    assert resized.moved and resized.gpu_after != resized.gpu_before
    assert share_of(grower).gpu_id == resized.gpu_after and share_of(grower).compute_milli == 800
    assert share_of(neighbour).gpu_id == resized.gpu_before  # the neighbour stays where it was
    assert allocation_violations(cluster.pk) == []


def test_stays_put_with_the_reason_when_no_gpu_fits(context, cluster):
    grower = fraction(context, cluster, "grower", 50)
    fraction(context, cluster, "first", 50)
    fraction(context, cluster, "second", 60)  # the other GPU
    before = share_of(grower)

    resized = resize_claim(grower.pk, compute_percent=90)

    assert not resized.moved and "insufficient GPU compute" in resized.refusal
    after = share_of(grower)
    assert (after.gpu_id, after.compute_milli) == (before.gpu_id, 500)
    assert Claim.objects.get(pk=grower.pk).compute_percent == 50
    assert allocation_violations(cluster.pk) == []


def test_shrinks_in_place_and_a_pending_or_gone_claim_is_not_resized(context, cluster):
    claim = fraction(context, cluster, "c", 60)
    assert resize_claim(claim.pk, compute_percent=30).gpu_after == share_of(claim).gpu_id
    assert share_of(claim).compute_milli == 300
    Claim.objects.filter(pk=claim.pk).delete()
    assert resize_claim(claim.pk, compute_percent=40) is None


def test_a_function_decides_on_the_claim_as_it_stands_under_the_lock(context, cluster):
    claim = fraction(context, cluster, "c", 20)
    Claim.objects.filter(pk=claim.pk).update(compute_percent=30)  # changed since the caller read it
    seen = []

    def step(current: Claim) -> int | None:
        seen.append(current.compute_percent)
        return None  # leave it

    left = resize_claim(claim.pk, compute_percent=step)
    assert seen == [30] and (left.asked, left.compute_percent, left.changed) == (None, 30, False)
    assert share_of(claim).compute_milli == 200  # nothing written

    grown = resize_claim(claim.pk, compute_percent=lambda current: current.compute_percent + 10)
    assert (grown.claim.compute_percent, grown.asked, grown.compute_percent, grown.changed) == (
        30,
        40,
        40,
        True,
    )
    assert share_of(claim).compute_milli == 400
