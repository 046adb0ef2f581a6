"""The driver-upgrade page says what draining each node would do to its claims (move where, or wait
why), computed on a copy of the inventory: nothing is written."""

import pytest

from claims.allocator import create_claim, drain_preview, release_claim
from claims.models import Allocation, AllocationEvent, Claim
from nodepools.models import Node
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_l4(owner, make_cluster, make_pool):
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(
        cluster, name="frac", gpu_model="l4", nodes=2, gpus_per_node=1, sharing_mode="fractional"
    )
    reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    for name in ("big1", "big2"):
        claim = create_claim(
            context=context, cluster=cluster, name=name, kind="fraction", gpu_memory_mib=20480
        )
        assert claim.status == "allocated"
    return pool


def held() -> dict[int, int]:
    return dict(Allocation.objects.values_list("claim_id", "node_id"))


def test_claims_that_fit_nowhere_else_would_wait_and_nothing_is_written(two_l4):
    nodes = list(Node.objects.filter(pool=two_l4).values_list("pk", flat=True))
    before, events = held(), AllocationEvent.objects.count()
    preview = drain_preview(two_l4.cluster_id, nodes)
    assert sorted(o.claim.name for outcomes in preview.values() for o in outcomes) == ["big1", "big2"]
    for outcomes in preview.values():
        (outcome,) = outcomes
        assert outcome.to_node == "" and "insufficient GPU memory" in outcome.reason
    assert held() == before and AllocationEvent.objects.count() == events


def test_a_claim_with_room_elsewhere_would_move_there(two_l4, client, owner):
    release_claim(Claim.objects.get(name="big2"))
    big1 = Claim.objects.select_related("allocation__node").get(name="big1")
    other = Node.objects.filter(pool=two_l4).exclude(pk=big1.allocation.node_id).get()
    (outcome,) = drain_preview(two_l4.cluster_id, [big1.allocation.node_id])[big1.allocation.node_id]
    assert (outcome.claim.pk, outcome.to_node, outcome.reason) == (big1.pk, other.name, "")
    client.force_login(owner)
    page = client.get(f"/pools/{two_l4.pk}/upgrade/").content.decode()
    assert f'data-drain-claim="{big1.pk}"' in page and f"move to <code>{other.name}</code>" in page


@pytest.mark.parametrize("preemptible", [True, False])
def test_a_moved_claim_with_no_room_would_preempt_lower_priority_and_the_page_says_so(
    two_l4, client, owner, preemptible
):
    """As the drain's placement pass would (claims.allocator.preemption): the fewest preemptible claims
    of lower priority make room; a non-preemptible one never does, and the claim would wait."""
    Claim.objects.filter(name="big1").update(priority=5)
    Claim.objects.filter(name="big2").update(preemptible=preemptible)
    big1 = Claim.objects.select_related("allocation__node").get(name="big1")
    big2 = Claim.objects.select_related("allocation__node").get(name="big2")
    before = held()
    (outcome,) = drain_preview(two_l4.cluster_id, [big1.allocation.node_id])[big1.allocation.node_id]
    assert held() == before  # nothing written
    client.force_login(owner)
    page = client.get(f"/pools/{two_l4.pk}/upgrade/").content.decode()
    if preemptible:
        assert outcome.to_node == big2.allocation.node.name
        assert [c.name for c in outcome.preempts] == ["big2"]
        assert "preempting default/big2 (priority 0): they wait until room frees" in page
    else:
        assert (outcome.to_node, outcome.preempts) == ("", ())
        assert "insufficient GPU memory" in outcome.reason and "data-drain-preempts" not in page
