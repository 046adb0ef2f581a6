"""A cluster and a pool NVKE creates with NVKE_PROVIDER=clusterapi, through the services a request and
its tasks call: the cluster waits `provisioning` while Cluster API brings its control plane up, then
runs with NVKE's own token; the pool's MachineDeployment brings GPU nodes that become Node rows."""

import pytest

from clusters.models import Cluster
from clusters.services import delete_cluster, provision, teardown
from nodepools.models import Node, NodePool
from nodepools.services import reconcile
from upgrades import control_plane
from upgrades.compatibility import kubernetes_refusal

from .conftest import NS

CORE = "cluster.x-k8s.io/v1beta2"
KCP = "controlplane.cluster.x-k8s.io/v1beta2"


@pytest.fixture
def clusterapi(settings, capi_setting):
    settings.NVKE_PROVIDER = "clusterapi"


@pytest.fixture
def tenant(owner):
    return owner.memberships.get().tenant


def ready(obj) -> dict:
    return next(c for c in obj.conditions if c["type"] == "Ready")


def test_a_cluster_runs_once_cluster_api_has_its_control_plane_up(
    clusterapi, tenant, make_cluster, management, cluster_api, workload
):
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    provision(cluster.pk)
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.PROVISIONING
    assert (ready(cluster)["status"], ready(cluster)["reason"]) == ("False", "WaitingForControlPlane")
    key = f"c{cluster.pk}"
    control_plane = management.get(
        "controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", f"{key}-control-plane", NS
    )
    assert (control_plane["spec"]["replicas"], control_plane["spec"]["version"]) == (1, "v1.35.1")

    cluster_api.workloads[key] = workload
    management.settle()
    provision(cluster.pk)
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.RUNNING
    assert (cluster.endpoint, cluster.ca_bundle) == (workload.url, workload.ca_bundle)
    assert cluster.admin_token in workload.store.tokens
    assert ready(cluster)["reason"] == "Provisioned"


def test_a_control_plane_still_coming_up_changes_nothing_on_a_repeated_step(
    clusterapi, tenant, make_cluster, cluster_api
):
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    provision(cluster.pk)
    first = Cluster.objects.get(pk=cluster.pk)
    provision(cluster.pk)
    again = Cluster.objects.get(pk=cluster.pk)
    assert again.updated_at == first.updated_at  # the condition did not change: nothing saved
    assert again.status == Cluster.Status.PROVISIONING


def test_a_pool_gets_its_gpu_nodes_from_a_machine_deployment_and_goes_with_the_cluster(
    clusterapi, tenant, make_cluster, make_pool, management, cluster_api, workload
):
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    key = f"c{cluster.pk}"
    cluster_api.workloads[key] = workload
    provision(cluster.pk)
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.RUNNING
    pool = make_pool(
        cluster,
        "h100",
        gpu_model="h100-sxm5-80gb",
        nodes=2,
        gpus_per_node=8,
        driver="570.133.20",
        status=NodePool.Status.PROVISIONING,
    )
    cluster_api.pending.add(f"{key}-h100")
    reconcile(pool.pk)
    pool.refresh_from_db()
    assert (pool.status, pool.status_reason) == ("pending", "WaitingForMachines")
    assert pool.status_message.startswith(f"MachineDeployment {key}-h100: 0 of 2 machines ready")

    cluster_api.pending.clear()
    management.settle()
    reconcile(pool.pk)
    pool.refresh_from_db()
    assert pool.status == "ready"
    nodes = Node.objects.filter(pool=pool).order_by("name")
    assert [(n.name.rpartition("-")[0], n.gpus.count()) for n in nodes] == [(f"{key}-h100", 8)] * 2

    delete_cluster(cluster)
    teardown(cluster.pk)
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    management.settle()
    assert management.list(CORE, "Cluster", NS) == []
    assert management.list(CORE, "MachineDeployment", NS) == []
    assert workload.list("v1", "Node") == []


def test_a_control_plane_upgrade_sets_the_kubeadm_control_plane_version_and_waits_for_its_machines(
    clusterapi, capi_setting, tenant, make_cluster, make_pool, management, cluster_api, workload
):
    capi_setting.kubernetes_versions = {**capi_setting.kubernetes_versions, "1.36": "v1.36.0"}
    capi_setting.save()
    cluster = make_cluster(tenant, "train", status=Cluster.Status.PROVISIONING)
    key = f"c{cluster.pk}"
    cluster_api.workloads[key] = workload
    provision(cluster.pk)
    cluster.refresh_from_db()
    pool = make_pool(
        cluster, "h100", gpu_model="h100-sxm5-80gb", nodes=1, gpus_per_node=8, driver="570.133.20"
    )
    cluster_api.rolling.add(key)

    control_plane.start(cluster, "1.36")
    assert not control_plane.step(cluster.pk)  # Cluster API is still replacing its machines
    kcp = management.get(KCP, "KubeadmControlPlane", f"{key}-control-plane", NS)
    assert kcp["spec"]["version"] == "v1.36.0" and kcp["status"]["versions"][0]["version"] == "v1.35.1"
    cluster.refresh_from_db()
    assert (cluster.kubernetes_version.version, cluster.kubernetes_target.version) == ("1.35", "1.36")

    cluster_api.rolling.clear()
    management.settle()
    assert control_plane.step(cluster.pk)
    cluster.refresh_from_db()
    assert (cluster.kubernetes_version.version, cluster.kubernetes_target) == ("1.36", None)
    pool.refresh_from_db()
    assert kubernetes_refusal(pool, "1.36") is None  # its pools may follow (test_pool_upgrades.py)
