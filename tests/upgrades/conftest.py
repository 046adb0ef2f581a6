import pytest

from claims import allocator as claims_service
from claims.models import Allocation
from nodepools.models import Node
from nodepools.services import reconcile
from nvke.providers.simulator.models import SimNode
from nvke.tenancy.context import TenantContext
from upgrades.controller import tick
from upgrades.models import UpgradeRun
from upgrades.node_machine import ACTIVE


@pytest.fixture(autouse=True)
def instant_steps(monkeypatch):
    """Simulated upgrade operations take no time unless a test says otherwise."""
    monkeypatch.setenv("NVKE_SIM_UPGRADE_STEP_S", "")
    monkeypatch.setenv("NVKE_SIM_DRIVER_FAILURE_RATE", "0")


@pytest.fixture
def context(owner):
    membership = owner.memberships.get()
    return TenantContext(membership.tenant, membership.role)


@pytest.fixture
def make_upgrade_pool(owner, make_cluster, make_pool):
    """make_upgrade_pool(nodes, claims) -> an L4 pool on 580.105.08 with real simulator nodes and
    `claims` one-GPU claims placed on them."""

    def make(nodes: int = 4, claims: int = 0, name: str = "gpu", cluster=None):
        tenant = owner.memberships.get().tenant
        cluster = cluster or make_cluster(tenant, "prod")
        pool = make_pool(cluster, name=name, gpu_model="l4", nodes=nodes, gpus_per_node=2)
        reconcile(pool.pk)
        context = TenantContext(tenant, "owner")
        for i in range(claims):
            claims_service.create_claim(
                context=context, cluster=cluster, name=f"job-{i}", kind="whole", gpus=1
            )
        return pool

    return make


def unavailable(run: UpgradeRun) -> int:
    states = dict(run.nodes.values_list("name", "state"))
    return sum(
        1
        for node in Node.objects.filter(pool=run.pool)
        if node.cordoned or node.status != Node.Status.READY or states.get(node.name) in ACTIVE
    )


def check_invariants(run: UpgradeRun) -> None:
    """What must hold between any two ticks."""
    run.refresh_from_db()
    out_before = run.nodes.filter(pre_cordoned=True).count()
    out_before += run.history.filter(reason="CordonedByEarlierRun").count()  # an earlier run's kept nodes
    limit = max(run.max_unavailable_of(run.nodes.filter(retire=False).count()), out_before)
    surge = max(Node.objects.filter(pool=run.pool).count() - run.pool.node_count, 0)  # maxSurge's nodes
    assert unavailable(run) <= limit + surge, f"{unavailable(run)} nodes unavailable, limit {limit} + {surge}"
    if run.failed_nodes == "keep-cordoned":  # a driver not validated never serves claims
        for row in run.nodes.filter(driver_touched=True, node__isnull=False).select_related("node"):
            assert row.node.cordoned, f"{row.name} ({row.state}) is in service on an unvalidated driver"
            assert not Allocation.objects.filter(node=row.node).exists(), f"{row.name} got claims"
    for row in run.nodes.filter(state__in=["validation-required", "uncordon-required"]):
        assert not Allocation.objects.filter(node__name=row.name).exists(), (
            f"{row.name} got a driver undrained"
        )
    installing = SimNode.objects.filter(pool=run.pool.name, driver_target=run.target_release.version)
    replacing = SimNode.objects.filter(pool=run.pool.name).exclude(kubelet_target="")
    for sim in [*installing, *replacing]:
        assert not Allocation.objects.filter(node__name=sim.name).exists(), (
            f"{sim.name} installs under claims"
        )


def drive(run: UpgradeRun, max_ticks: int = 500) -> UpgradeRun:
    """Tick the run to the end in this process, checking the invariants after every tick."""
    for _ in range(max_ticks):
        run.refresh_from_db()
        if tick(run.pk, run.tick_seq) is None:
            check_invariants(run)
            return run
        check_invariants(run)
    raise AssertionError(f"run {run.pk} did not settle in {max_ticks} ticks: {run.status}")
