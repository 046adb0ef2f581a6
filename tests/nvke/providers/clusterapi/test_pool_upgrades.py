"""A pool's Kubernetes and node image upgrades on Cluster API: the run drains each node its own way, then
has Cluster API replace the node's Machine (the MachineDeployment rolls out OnDelete, so nothing is
replaced that NVKE did not drain); the successor's node has a name of its own, and the run's row follows
it there to validate and uncordon it. Driven tick by tick with Cluster API's controllers (the fake
management cluster) and the pool's inventory (what its watch would do) between ticks."""

import pytest

from catalog.models import NodeImage
from claims import allocator
from claims.models import Allocation
from clusters.models import Cluster
from clusters.services import provision
from nodepools.models import Node
from nodepools.services import reconcile
from nvke.providers.clusterapi.models import MachineReplacement
from nvke.tenancy.context import TenantContext
from tests.upgrades.conftest import check_invariants
from upgrades import control_plane, services
from upgrades.controller import tick
from upgrades.models import UpgradeRun

from .conftest import H100, NS

CORE = "cluster.x-k8s.io/v1beta2"
OLD_IMAGE, NEW_IMAGE = "ubuntu-2204-gpu-2025-06", "ubuntu-2404-gpu-2026-10"


@pytest.fixture
def pool(settings, capi_setting, owner, make_cluster, make_pool, management, cluster_api, workload):
    """A running Cluster API cluster on 1.35 whose control plane may go to 1.36, with an H100 pool of
    three nodes booted from OLD_IMAGE (machine templates for both images) and two claims on it."""
    settings.NVKE_PROVIDER = "clusterapi"
    capi_setting.kubernetes_versions = {**capi_setting.kubernetes_versions, "1.36": "v1.36.0"}
    capi_setting.save()
    for name, image in (("gpu-h100-2204", OLD_IMAGE), ("gpu-h100-2404", NEW_IMAGE)):
        labels = {"nvke.io/gpu-model": "h100-sxm5-80gb", "nvke.io/node-image": image}
        management.create(_template(name, labels))
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    cluster_api.workloads[f"c{cluster.pk}"] = workload
    provision(cluster.pk)
    cluster.refresh_from_db()
    made = make_pool(
        cluster,
        "h100",
        gpu_model="h100-sxm5-80gb",
        nodes=3,
        gpus_per_node=8,
        driver="570.133.20",
        node_image=NodeImage.objects.get(name=OLD_IMAGE),
    )
    reconcile(made.pk)
    context = TenantContext(tenant, "owner")
    for name in ("a", "b"):
        allocator.create_claim(context=context, cluster=cluster, name=name, kind="whole", gpus=4)
    return made


def _template(name: str, labels: dict) -> dict:
    from tests.kubeapi import capi

    template = capi.machine_template(name, gpu=H100, labels=labels)
    template["metadata"]["namespace"] = NS
    return template


def drive(run: UpgradeRun, management) -> UpgradeRun:
    """Tick the run to its end; between ticks Cluster API acts and the pool's inventory follows."""
    for _ in range(100):
        run.refresh_from_db()
        ticking = tick(run.pk, run.tick_seq)
        management.settle()
        reconcile(run.pool_id)
        check_invariants(run)
        if ticking is None:
            run.refresh_from_db()
            return run
    raise AssertionError(f"run {run.pk} did not settle: {run.status}")


def deployment(management, pool) -> dict:
    return management.get(CORE, "MachineDeployment", f"c{pool.cluster_id}-h100", NS)


def test_a_kubernetes_upgrade_replaces_each_machine_after_its_drain_and_follows_it_to_its_new_node(
    pool, management, workload
):
    before = set(Node.objects.filter(pool=pool).values_list("name", flat=True))
    assert len(before) == 3 and Allocation.objects.filter(node__pool=pool).count() == 2
    rollout = deployment(management, pool)["spec"]["rollout"]
    assert rollout == {"strategy": {"type": "OnDelete"}}  # Cluster API never rolls the pool by itself
    control_plane.start(pool.cluster, "1.36")
    assert control_plane.step(pool.cluster_id)
    pool.refresh_from_db()

    context = TenantContext(pool.tenant, "owner")
    run = services.create_run(context=context, pool=pool, kubernetes_version="1.36", max_unavailable="1")
    run = drive(run, management)

    assert (run.status, run.reason, run.max_unavailable_seen) == ("completed", "AllNodesUpgraded", 1)
    nodes = Node.objects.filter(pool=pool)
    after = set(nodes.values_list("name", flat=True))
    assert len(after) == 3 and after.isdisjoint(before)  # every machine replaced
    assert set(nodes.values_list("kubelet_version", "cordoned")) == {("v1.36.0", False)}
    assert {n["metadata"]["name"] for n in workload.list("v1", "Node")} == after
    assert set(run.nodes.values_list("name", "state")) == {(name, "upgrade-done") for name in after}
    replaced = run.history.filter(reason="Replaced").values_list("message", flat=True)
    assert len(replaced) == 3 and all("is now" in m for m in replaced)
    assert deployment(management, pool)["spec"]["template"]["spec"]["version"] == "v1.36.0"
    pool.refresh_from_db()
    assert pool.kubernetes_version == "1.36"
    # The claims were moved off each node before its Machine went, and run on the new nodes.
    assert set(Allocation.objects.filter(node__pool=pool).values_list("node__name", flat=True)) <= after
    assert Allocation.objects.filter(node__pool=pool).count() == 2


def test_a_node_image_upgrade_moves_the_pool_to_the_images_machine_template(pool, management):
    machines = management.list(CORE, "Machine", NS, label_selector="nvke.io/pool=h100")
    assert {m["spec"]["infrastructureRef"]["name"] for m in machines} == {"gpu-h100-2204"}
    assert set(Node.objects.filter(pool=pool).values_list("node_image", flat=True)) == {OLD_IMAGE}

    context = TenantContext(pool.tenant, "owner")
    target = NodeImage.objects.get(name=NEW_IMAGE)
    run = drive(services.create_run(context=context, pool=pool, node_image=target), management)

    assert (run.kind, run.status) == ("image", "completed")
    machines = management.list(CORE, "Machine", NS, label_selector="nvke.io/pool=h100")
    assert {m["spec"]["infrastructureRef"]["name"] for m in machines} == {"gpu-h100-2404"}
    nodes = Node.objects.filter(pool=pool)
    assert set(nodes.values_list("node_image", "kubelet_version")) == {(NEW_IMAGE, "v1.35.1")}
    pool.refresh_from_db()
    assert pool.node_image == target


def test_an_image_without_a_machine_template_fails_the_first_node_and_deletes_nothing(pool, management):
    for template in management.list(f"{_template('x', {})['apiVersion']}", "FakeMachineTemplate", NS):
        if template["metadata"]["labels"].get("nvke.io/node-image") == NEW_IMAGE:
            management.delete(template["apiVersion"], "FakeMachineTemplate", template["metadata"]["name"], NS)
    machines = {m["metadata"]["name"] for m in management.list(CORE, "Machine", NS)}

    context = TenantContext(pool.tenant, "owner")
    target = NodeImage.objects.get(name=NEW_IMAGE)
    run = drive(services.create_run(context=context, pool=pool, node_image=target), management)

    assert run.status == "paused" and run.reason == "FailureBudgetExhausted"
    failed = run.nodes.get(state="upgrade-failed")
    assert failed.reason == "NoMachineTemplate" and "nvke.io/node-image=" + NEW_IMAGE in failed.message
    assert {m["metadata"]["name"] for m in management.list(CORE, "Machine", NS)} == machines
    assert not MachineReplacement.objects.exists()


def test_a_surge_comes_up_on_the_new_version_and_goes_with_the_delete_machine_annotation(
    pool, management, workload
):
    control_plane.start(pool.cluster, "1.36")
    assert control_plane.step(pool.cluster_id)
    pool.refresh_from_db()
    before = set(Node.objects.filter(pool=pool).values_list("name", flat=True))

    context = TenantContext(pool.tenant, "owner")
    run = services.create_run(
        context=context, pool=pool, kubernetes_version="1.36", max_unavailable="0", max_surge="1"
    )
    run.refresh_from_db()
    tick(run.pk, run.tick_seq)  # asks for the surge: the pool's reconcile makes it on 1.36
    management.settle()
    reconcile(pool.pk)
    surge = Node.objects.filter(pool=pool).exclude(name__in=before).get()
    assert surge.kubelet_version == "v1.36.0"
    assert deployment(management, pool)["spec"]["replicas"] == 4
    run = drive(run, management)

    assert (run.status, run.message) == ("completed", "All 3 nodes run Kubernetes 1.36.")
    retired = run.nodes.get(retire=True)
    assert (retired.name, retired.state, retired.reason) == (surge.name, "upgrade-done", "Removed")
    nodes = Node.objects.filter(pool=pool)
    # Not the newest Machine (the last successor), which the deployment would have removed unmarked.
    assert nodes.count() == 3 and surge.name not in set(nodes.values_list("name", flat=True))
    assert set(nodes.values_list("kubelet_version", flat=True)) == {"v1.36.0"}
    assert deployment(management, pool)["spec"]["replicas"] == 3
    assert Allocation.objects.filter(node__pool=pool).count() == 2
