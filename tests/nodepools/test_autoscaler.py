"""The pool autoscaler's control loop (nodepools/autoscaler/service.py) on the simulator, tasks run in
process: a pending claim grows its pool, a node idle past the pool's delay is drained and removed (that
node, not the provider's pick), a drain that never ends puts the node back, a claim arriving meanwhile
calls the removal off; every decision is on the pool's record, in the API and in the audit log."""

import datetime

import pytest
from django.utils import timezone

from audit.models import AuditEntry
from claims import allocator
from claims.models import Claim
from nodepools import services
from nodepools.autoscaler import autoscale
from nodepools.models import AutoscalerDecision, Node, NodePool
from nvke.providers.simulator.models import SimFault, SimNode
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(owner, make_cluster, make_pool) -> NodePool:
    """One L4 per node, one node, room for three; autoscaling with a minute's scale-down delay."""
    tenant = owner.memberships.get().tenant
    pool = make_pool(make_cluster(tenant), nodes=1, gpus_per_node=1, autoscaling=True, scale_down_delay_s=60)
    NodePool.objects.filter(pk=pool.pk).update(min_nodes=1, max_nodes=3)
    services.reconcile(pool.pk)
    return NodePool.objects.get(pk=pool.pk)


def claim(pool: NodePool, name: str) -> Claim:
    return allocator.create_claim(
        context=TenantContext(pool.tenant, "owner"), cluster=pool.cluster, name=name, kind="whole"
    )


def step(pool: NodePool, callbacks):
    with callbacks(execute=True):
        decisions = autoscale(pool.cluster_id)
    pool.refresh_from_db()
    return decisions.get(pool.pk)


def idle_for(node: Node, seconds: int) -> None:
    Node.objects.filter(pk=node.pk).update(idle_since=timezone.now() - datetime.timedelta(seconds=seconds))


def test_a_pending_claim_grows_the_pool_and_an_idle_node_goes_after_its_delay(
    pool, django_capture_on_commit_callbacks
):
    callbacks = django_capture_on_commit_callbacks
    first = claim(pool, "first")
    with callbacks(execute=True):  # the pool is full: it waits, and asks the autoscaler at once
        second = claim(pool, "second")
    pool.refresh_from_db()
    second.refresh_from_db()
    assert (pool.node_count, Node.objects.filter(pool=pool).count(), second.status) == (2, 2, "allocated")
    grown = AutoscalerDecision.objects.get(pool=pool)
    assert (grown.action, grown.reason, grown.from_nodes, grown.to_nodes) == (
        "scale-up",
        "PendingClaims",
        1,
        2,
    )
    entry = AuditEntry.objects.filter(object_type="nodepools.nodepool", object_id=str(pool.pk)).first()
    assert (entry.actor, entry.action, entry.changes) == ("autoscaler", "update", {"node_count": [1, 2]})
    assert AuditEntry.objects.get(object_type="nodepools.autoscalerdecision").actor == "autoscaler"

    allocator.release_claim(first)  # the OLDER node is the idle one; the simulator would drop the newest
    older = Node.objects.get(pk=Claim.objects.get(pk=second.pk).allocation.node_id)
    older = Node.objects.filter(pool=pool).exclude(pk=older.pk).get()
    assert step(pool, callbacks).reason == "NodesIdle"  # idle from now on
    assert Node.objects.get(pk=older.pk).idle_since is not None
    idle_for(older, 61)
    decision = step(pool, callbacks)
    assert (decision.action, decision.node, pool.scale_down_phase) == ("scale-down", older.name, "draining")
    assert Node.objects.get(pk=older.pk).cordoned  # out of placement first, as an upgrade drains a node
    assert SimNode.objects.get(name=older.name).drain_state == "drained"  # the provider's drain, after commit
    step(pool, callbacks)  # drained: one node fewer, and the reconcile removes that one
    assert pool.node_count == 1
    assert list(Node.objects.filter(pool=pool).values_list("name", flat=True)) == [
        Node.objects.get(allocations__claim=second).name
    ]
    assert Claim.objects.get(pk=second.pk).status == "allocated"  # untouched on the node that stays
    step(pool, callbacks)
    assert (pool.scale_down_node, pool.scale_down_phase) == ("", "")
    assert list(AutoscalerDecision.objects.filter(pool=pool).values_list("reason", "to_nodes")) == [
        ("NodesInUse", 1),
        ("NodeDrained", 1),
        ("NodeIdle", 1),
        ("NodesIdle", 2),
        ("PendingClaims", 2),
    ]
    audit = AuditEntry.objects.filter(object_type="nodepools.nodepool", object_id=str(pool.pk)).first()
    assert (audit.actor, audit.changes) == ("autoscaler", {"node_count": [2, 1]})
    conditions = {c["type"]: c for c in pool.conditions}
    assert conditions["Autoscaling"]["reason"] == "NodesInUse"


def test_never_below_min_nodes_and_no_decision_twice(pool, django_capture_on_commit_callbacks):
    idle_for(Node.objects.get(pool=pool), 3600)
    assert step(pool, django_capture_on_commit_callbacks).reason == "AtMinNodes"
    assert step(pool, django_capture_on_commit_callbacks).reason == "AtMinNodes"
    assert AutoscalerDecision.objects.filter(pool=pool).count() == 1 and pool.node_count == 1


@pytest.fixture
def two_nodes(pool, django_capture_on_commit_callbacks) -> NodePool:
    with django_capture_on_commit_callbacks(execute=True):
        services.update_pool(pool, node_count=2)
    pool.refresh_from_db()
    return pool


def test_a_drain_that_never_ends_puts_the_node_back(two_nodes, settings, django_capture_on_commit_callbacks):
    pool, callbacks = two_nodes, django_capture_on_commit_callbacks
    node = Node.objects.filter(pool=pool).first()
    SimFault.objects.create(operation="drain", target=node.name, reason="DisruptionBudget", remaining=100)
    step(pool, callbacks)
    idle_for(node, 61)
    assert step(pool, callbacks).action == "scale-down"
    step(pool, callbacks)  # blocked by its budget: still draining
    assert pool.scale_down_phase == "draining" and pool.node_count == 2
    settings.NVKE_AUTOSCALER_DRAIN_TIMEOUT_S = 0
    step(pool, callbacks)
    last = AutoscalerDecision.objects.filter(pool=pool).first()
    assert (last.action, last.reason) == ("cancel-scale-down", "DrainTimedOut")
    assert "did not drain within 0 s (DisruptionBudget: Injected failure)" in last.message
    assert (pool.scale_down_node, pool.node_count) == ("", 2)  # uncordoned at the provider: done
    assert not Node.objects.get(pk=node.pk).cordoned and not SimNode.objects.get(name=node.name).unschedulable


def test_a_claim_arriving_while_a_node_drains_keeps_it(two_nodes, django_capture_on_commit_callbacks):
    pool, callbacks = two_nodes, django_capture_on_commit_callbacks
    busy, idle = Node.objects.filter(pool=pool)
    SimFault.objects.create(operation="drain", target=idle.name, remaining=100)
    claim(pool, "holds-busy")
    busy = Node.objects.get(allocations__isnull=False)
    idle = Node.objects.filter(pool=pool).exclude(pk=busy.pk).get()
    step(pool, callbacks)
    idle_for(idle, 61)
    assert step(pool, callbacks).node == idle.name
    with callbacks(execute=True):
        late = claim(pool, "late")  # no schedulable node fits it: the draining node comes back for it
    late.refresh_from_db()
    pool.refresh_from_db()
    assert (pool.scale_down_node, pool.node_count, late.status) == ("", 2, "allocated")
    assert late.allocation.node_id == idle.pk
    assert AutoscalerDecision.objects.filter(pool=pool).first().action == "cancel-scale-down"


def test_the_api_sets_autoscaling_and_shows_its_decisions(api, pool, make_member, client_for):
    response = api.patch(f"/api/v1/node-pools/{pool.pk}/", {"scale_down_delay_s": 0})
    assert response.status_code == 400 and "scale_down_delay_s" in response.data["details"]["fields"]
    response = api.patch(f"/api/v1/node-pools/{pool.pk}/", {"autoscaling": False, "scale_down_delay_s": 120})
    assert response.status_code == 200
    assert (response.data["autoscaling"], response.data["scale_down_delay_s"]) == (False, 120)
    AutoscalerDecision.objects.create(
        tenant=pool.tenant,
        pool=pool,
        action="scale-up",
        reason="PendingClaims",
        message="m",
        from_nodes=1,
        to_nodes=2,
    )
    body = client_for(make_member("acme", "viewer")).get(f"/api/v1/node-pools/{pool.pk}/autoscaling/").data
    assert body["autoscaling"] is False and body["removing"] is None
    assert [(d["action"], d["reason"], d["from_nodes"], d["to_nodes"]) for d in body["decisions"]] == [
        ("scale-up", "PendingClaims", 1, 2)
    ]
    other = client_for(make_member("other", "owner"))
    assert other.get(f"/api/v1/node-pools/{pool.pk}/autoscaling/").status_code == 404


def test_a_driver_upgrade_run_holds_the_pools_nodes(two_nodes, django_capture_on_commit_callbacks):
    """A node leaving a run fails it (NodeGone), so no idle node goes while one is not finished."""
    from catalog.models import DriverRelease
    from upgrades import services as upgrades

    pool = two_nodes
    run = upgrades.create_run(
        context=TenantContext(pool.tenant, "owner"),
        pool=pool,
        target_release=DriverRelease.objects.get(version="595.71.05"),
        start=False,
    )
    for node in Node.objects.filter(pool=pool):
        idle_for(node, 3600)
    step(pool, django_capture_on_commit_callbacks)
    decision = step(pool, django_capture_on_commit_callbacks)
    assert (decision.action, decision.reason) == ("none", "ScaleDownHeld")
    assert f"driver upgrade run {run.pk} is pending" in decision.message
