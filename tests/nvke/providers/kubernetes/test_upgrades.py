"""The existing upgrade state machine driving a real (fake) cluster through the Kubernetes provider:
pools adopt attached nodes, a run cordons, drains through the Eviction API, moves each node to the new
NVIDIADriver, waits for the driver and validator pods and GFD's version, and uncordons."""

import pytest

from catalog.models import DriverRelease
from nodepools.models import Node
from nodepools.services import reconcile
from nvke.providers.kubernetes import gpus
from nvke.providers.kubernetes.operations import UPGRADE_STATE_LABEL as UPGRADE_STATE
from tests.kubeapi import objects
from upgrades.controller import tick
from upgrades.models import UpgradeRun
from upgrades.services import control, create_run

pytestmark = pytest.mark.django_db
TARGET = "580.105.08"


@pytest.fixture
def pool(attach, gpu_cluster, make_attached_pool):
    cluster = attach(gpu_cluster)
    return make_attached_pool(cluster, 3)


def drive(server, run: UpgradeRun, max_ticks: int = 200) -> UpgradeRun:
    """Tick to the end; the cluster's actors settle between ticks, as time would let them."""
    for _ in range(max_ticks):
        server.settle()
        run.refresh_from_db()
        if tick(run.pk, run.tick_seq) is None:
            run.refresh_from_db()
            return run
        cordoned = sum(bool(n["spec"].get("unschedulable")) for n in server.list("v1", "Node"))
        assert cordoned <= run.max_unavailable_of(run.nodes.count()), "more nodes out than maxUnavailable"
    raise AssertionError(f"run {run.pk} did not settle: {run.status} {run.message}")


def start(context, pool, **strategy) -> UpgradeRun:
    return create_run(
        context=context, pool=pool, target_release=DriverRelease.objects.get(version=TARGET), **strategy
    )


def test_the_pool_adopts_the_clusters_nodes(pool, gpu_cluster):
    assert pool.status == "ready", pool.status_message
    assert sorted(Node.objects.filter(pool=pool).values_list("name", flat=True)) == [
        "gpu-a",
        "gpu-b",
        "gpu-c",
    ]
    assert all(n.driver_version == "570.133.20" for n in Node.objects.filter(pool=pool))
    assert {n["metadata"]["labels"][gpus.POOL_LABEL] for n in gpu_cluster.list("v1", "Node")} == {"train"}


def test_a_run_upgrades_every_node_one_at_a_time(context, pool, gpu_cluster):
    gpu_cluster.create(objects.pod("job-1", node="gpu-a", labels={"app": "train"}))
    run = drive(gpu_cluster, start(context, pool, max_unavailable="1"))
    assert run.status == "completed", run.message
    for n in gpu_cluster.list("v1", "Node"):
        assert n["metadata"]["labels"][gpus.DRIVER_FULL] == TARGET
        assert not n["spec"].get("unschedulable"), f"{n['metadata']['name']} left cordoned"
        assert n["metadata"]["labels"][UPGRADE_STATE] == "upgrade-done", "kubectl sees the state"
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", flat=True)) == {TARGET}
    assert gpu_cluster.get("v1", "Pod", "job-1", namespace="default") is None, "the drain evicted the job"
    evictions = [p for m, p, *_ in gpu_cluster.requests if p.endswith("/eviction")]
    assert evictions == ["/api/v1/namespaces/default/pods/job-1/eviction"]


def test_a_budget_holds_the_drain_and_the_run_says_so(context, pool, gpu_cluster):
    gpu_cluster.create(objects.pod("db-0", node="gpu-a", labels={"app": "db"}))
    gpu_cluster.create(objects.pdb("db-budget", selector={"app": "db"}, min_available=1))
    run = start(context, pool, max_unavailable="1")
    for _ in range(12):
        gpu_cluster.settle()
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    run.refresh_from_db()
    assert run.status == "running"
    said = " ".join(run.history.values_list("message", flat=True)) + run.message
    assert "PodDisruptionBudget" in said, said
    assert gpu_cluster.get("v1", "Pod", "db-0", namespace="default") is not None
    gpu_cluster.delete("policy/v1", "PodDisruptionBudget", "db-budget", namespace="default")
    run = drive(gpu_cluster, run)
    assert run.status == "completed", run.message


def test_a_pod_under_two_budgets_fails_its_node_at_once(context, pool, gpu_cluster):
    gpu_cluster.create(objects.pod("db-0", node="gpu-a", labels={"app": "db"}))
    gpu_cluster.create(objects.pdb("one", selector={"app": "db"}, min_available=0))
    gpu_cluster.create(objects.pdb("two", selector={"app": "db"}, min_available=0))
    run = drive(gpu_cluster, start(context, pool, max_unavailable="1", failure_budget=3))
    row = run.nodes.get(name="gpu-a")
    assert (row.state, row.reason) == ("upgrade-failed", "EvictionMisconfigured")
    assert not gpu_cluster.get("v1", "Node", "gpu-a")["spec"].get("unschedulable"), "its driver is untouched"
    assert gpu_cluster.get("v1", "Pod", "db-0", namespace="default") is not None


def test_a_crash_looping_driver_fails_its_node_and_keeps_it_cordoned(context, pool, gpu_cluster):
    gpu_cluster.actors.crashloop_nodes.add("gpu-a")
    run = drive(gpu_cluster, start(context, pool, max_unavailable="1", failure_budget=1))
    states = dict(run.nodes.values_list("name", "state"))
    assert states["gpu-a"] == "upgrade-failed"
    failed = gpu_cluster.get("v1", "Node", "gpu-a")
    assert failed["spec"]["unschedulable"] is True, "kept cordoned"
    assert failed["metadata"]["labels"][UPGRADE_STATE] == "upgrade-failed"
    assert run.status in ("paused", "failed"), run.status


def test_a_node_cordoned_before_the_run_stays_cordoned(context, pool, gpu_cluster):
    gpu_cluster.patch_merge("v1", "Node", "gpu-c", {"spec": {"unschedulable": True}})
    reconcile(pool.pk)
    # The cordoned node counts against the budget, as the GPU Operator counts it: two leave one slot.
    run = drive(gpu_cluster, start(context, pool, max_unavailable="2"))
    assert run.status == "completed", run.message
    assert gpu_cluster.get("v1", "Node", "gpu-c")["spec"]["unschedulable"] is True
    assert gpu_cluster.get("v1", "Node", "gpu-c")["metadata"]["labels"][gpus.DRIVER_FULL] == TARGET


def driver_of(server, name: str) -> str:
    return server.get("v1", "Node", name)["metadata"]["labels"][gpus.DRIVER_FULL]


def test_a_canary_waits_for_approval_then_the_rest_follow(context, pool, gpu_cluster):
    run = start(context, pool, max_unavailable="1", canary_nodes=1, canary_approval=True)
    for _ in range(50):  # the run keeps ticking while it waits
        gpu_cluster.settle()
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
        if "waiting for approval" in run.message:
            break
    assert "waiting for approval" in run.message, run.message
    drivers = [driver_of(gpu_cluster, name) for name in ("gpu-a", "gpu-b", "gpu-c")]
    assert sorted(drivers) == ["570.133.20", "570.133.20", TARGET], "only the canary moved"
    run = control(run, "approve", context=context)
    run = drive(gpu_cluster, run)
    assert run.status == "completed" and {driver_of(gpu_cluster, n) for n in ("gpu-a", "gpu-b", "gpu-c")} == {
        TARGET
    }


def test_pause_stops_new_nodes_and_resume_finishes(context, pool, gpu_cluster):
    run = start(context, pool, max_unavailable="1")
    gpu_cluster.settle()
    tick(run.pk, run.tick_seq)  # the first node starts
    run = control(run, "pause", context=context)
    run = drive(gpu_cluster, run)
    assert run.status == "paused"
    moved = [n for n in ("gpu-a", "gpu-b", "gpu-c") if driver_of(gpu_cluster, n) == TARGET]
    assert len(moved) == 1, "the node in flight finishes; no other starts"
    assert not any(n["spec"].get("unschedulable") for n in gpu_cluster.list("v1", "Node")), "nothing left out"
    run = drive(gpu_cluster, control(run, "resume", context=context))
    assert run.status == "completed"


def test_abort_leaves_the_rest_on_their_driver_and_in_service(context, pool, gpu_cluster):
    run = start(context, pool, max_unavailable="1")
    gpu_cluster.settle()
    tick(run.pk, run.tick_seq)
    run = drive(gpu_cluster, control(run, "abort", context=context))
    assert run.status == "aborted"
    drivers = sorted(driver_of(gpu_cluster, n) for n in ("gpu-a", "gpu-b", "gpu-c"))
    assert drivers.count("570.133.20") >= 2
    assert not any(n["spec"].get("unschedulable") for n in gpu_cluster.list("v1", "Node"))
