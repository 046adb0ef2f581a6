"""maxSurge on the simulator: a Kubernetes upgrade first gives the pool extra nodes on the new version,
drains each old node onto them (so with maxUnavailable 0 the pool never has fewer nodes in service than
its size, and no claim waits), and at its end drains the extra nodes away again and has them removed."""

import pytest

from catalog.models import DriverRelease
from claims.models import Claim
from nodepools.models import Node
from nodepools.services import reconcile
from nvke.errors import DomainError
from upgrades import control_plane, services
from upgrades.controller import tick
from upgrades.models import UpgradeRun
from upgrades.node_machine import ACTIVE

from .conftest import check_invariants

pytestmark = pytest.mark.django_db


def in_service(run: UpgradeRun) -> int:
    """The pool's nodes ready, uncordoned and not taken out by the run."""
    out = set(run.nodes.filter(state__in=list(ACTIVE)).values_list("name", flat=True))
    nodes = Node.objects.filter(pool=run.pool, status=Node.Status.READY, cordoned=False)
    return sum(node.name not in out for node in nodes)


def drive(run: UpgradeRun, each=lambda run: None) -> UpgradeRun:
    """Tick the run to its end, the pool's reconcile (its provider's nodes into rows) after each tick as
    beat's or kube_sync's would follow it; `each(run)` checks what must hold between ticks."""
    for _ in range(300):
        run.refresh_from_db()
        ticking = tick(run.pk, run.tick_seq)
        reconcile(run.pool_id)
        check_invariants(run)
        each(run)
        if ticking is None:
            run.refresh_from_db()
            return run
    raise AssertionError(f"run {run.pk} did not settle: {run.status}")


@pytest.fixture
def pool(make_upgrade_pool):
    """Three L4 nodes of two GPUs with five one-GPU claims, the control plane already on 1.36."""
    pool = make_upgrade_pool(nodes=3, claims=5)
    control_plane.start(pool.cluster, "1.36")
    control_plane.step(pool.cluster_id)
    pool.refresh_from_db()
    return pool


def test_a_surge_keeps_every_node_in_service_and_every_claim_placed_while_machines_are_replaced(
    context, pool, client, owner
):
    before = set(Node.objects.filter(pool=pool).values_list("name", flat=True))
    lowest = []

    def check(run):
        lowest.append(in_service(run))
        assert not Claim.objects.filter(cluster=pool.cluster, status="pending").exists()

    run = services.create_run(
        context=context, pool=pool, kubernetes_version="1.36", max_unavailable="0", max_surge="1"
    )
    run = drive(run, check)

    assert (run.status, run.reason) == ("completed", "AllNodesUpgraded")
    assert run.message == "All 3 nodes run Kubernetes 1.36."
    assert min(lowest) >= 3  # maxUnavailable 0: never fewer than the pool's size in service
    nodes = Node.objects.filter(pool=pool)
    assert nodes.count() == 3 and set(nodes.values_list("kubelet_version", flat=True)) == {"v1.36.0"}
    surge = run.nodes.get(retire=True)
    assert surge.name not in before and surge.state == "upgrade-done" and surge.reason == "Removed"
    assert not nodes.filter(name=surge.name).exists()
    reasons = list(run.history.filter(type="Run").values_list("reason", flat=True))
    assert reasons.index("SurgeAdded") < reasons.index("SurgeRemoving") < reasons.index("AllNodesUpgraded")
    pool.refresh_from_db()
    assert (pool.node_count, pool.surge_nodes, pool.surge_remove, pool.new_machines) == (3, 0, [], {})
    assert Claim.objects.filter(cluster=pool.cluster, status="allocated").count() == 5
    client.force_login(owner)
    page = client.get(f"/upgrades/{run.pk}/").content.decode()
    assert "<dt>Max surge</dt><dd>1</dd>" in page and page.count(">surge</span>") == 1


def test_without_a_surge_maxunavailable_zero_is_refused_and_a_driver_run_takes_none(context, pool):
    with pytest.raises(DomainError) as refused:
        services.create_run(context=context, pool=pool, kubernetes_version="1.36", max_unavailable="0")
    assert refused.value.field == "max_unavailable"
    with pytest.raises(DomainError) as refused:
        services.create_run(
            context=context,
            pool=pool,
            target_release=DriverRelease.objects.get(version="595.71.05"),
            max_surge="1",
        )
    assert (refused.value.field, refused.value.code) == ("max_surge", "not_supported")
    assert not UpgradeRun.objects.exists()


def test_a_run_aborted_before_its_surge_was_drained_away_leaves_the_nodes_to_the_pool(context, pool):
    run = services.create_run(context=context, pool=pool, kubernetes_version="1.36", max_surge="1")
    for _ in range(3):
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
        reconcile(run.pool_id)
    assert Node.objects.filter(pool=pool).count() == 4
    services.control(run, "abort", context=context)
    run = drive(run)

    assert run.status == "aborted"
    kept = run.history.get(reason="SurgeKept")
    assert "the pool keeps them (4 nodes)" in kept.message
    pool.refresh_from_db()
    assert (pool.node_count, pool.surge_nodes, pool.new_machines) == (4, 0, {})
    assert Node.objects.filter(pool=pool).count() == 4  # nothing running on it was disturbed


def test_a_pools_own_budget_is_its_runs_default_and_a_bad_one_is_refused_naming_it(api, context, pool):
    url = f"/api/v1/node-pools/{pool.pk}/"
    for change, field in (
        ({"upgrade_max_unavailable": "0"}, "upgrade_max_unavailable"),
        ({"upgrade_max_surge": "x"}, "upgrade_max_surge"),
        ({"upgrade_max_unavailable": "101%", "upgrade_max_surge": "1"}, "upgrade_max_unavailable"),
    ):
        response = api.patch(url, change, format="json")
        assert response.status_code == 400 and response.data["details"]["field"] == field, response.data
    response = api.patch(url, {"upgrade_max_unavailable": "0", "upgrade_max_surge": "1"}, format="json")
    assert response.status_code == 200
    assert (response.data["upgrade_max_unavailable"], response.data["upgrade_max_surge"]) == ("0", "1")
    pool.refresh_from_db()

    kubernetes = services.create_run(context=context, pool=pool, kubernetes_version="1.36", start=False)
    assert (kubernetes.max_unavailable, kubernetes.max_surge) == ("0", "1")
    services.control(kubernetes, "abort", context=context)
    own = services.create_run(
        context=context, pool=pool, kubernetes_version="1.36", max_surge="2", start=False
    )
    assert (own.max_unavailable, own.max_surge) == ("0", "2")  # what the run says wins
    services.control(own, "abort", context=context)
    driver = services.create_run(
        context=context, pool=pool, target_release=DriverRelease.objects.get(version="595.71.05"), start=False
    )
    assert (driver.max_unavailable, driver.max_surge) == ("1", "0")  # in place: at least one node out
