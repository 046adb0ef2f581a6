"""The Cluster API provider's infrastructure half against a management cluster (the fake API server with
Cluster API's v1beta2 CRDs, which validates every object written): what it creates for a cluster and a
pool, how Cluster API's status comes back, and what deleting removes."""

import base64
import re

import pytest

from nvke.providers.base import ClusterRef, ProviderError, ProvisioningInProgress
from nvke.providers.clusterapi.infrastructure import ClusterAPIInfrastructure
from nvke.providers.kubernetes.operations import KubernetesOperations
from tests.kubeapi import capi

from .conftest import NS, pool_spec

CORE = f"{capi.CORE}/v1beta2"
KCP = f"{capi.CONTROL_PLANE}/v1beta2"
BOOTSTRAP = f"{capi.BOOTSTRAP}/v1beta2"
INFRA = f"{capi.INFRA}/v1beta2"


def infrastructure() -> ClusterAPIInfrastructure:
    return ClusterAPIInfrastructure(ClusterRef(name="c1", endpoint="", token="", provider="clusterapi"))


@pytest.fixture
def provisioned(capi_setting, cluster_api, workload):
    """Cluster c1, provisioned: its control plane is up on `workload`."""
    cluster_api.workloads["c1"] = workload
    return infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")


def test_provisioning_creates_the_cluster_its_control_plane_and_infrastructure(capi_setting, management):
    with pytest.raises(ProvisioningInProgress) as waiting:
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert waiting.value.reason == "WaitingForInfrastructure"  # no Cluster API controllers: no status
    assert waiting.value.message == (
        "Cluster c1: InfrastructureReady is not reported: The cluster's infrastructure is being provisioned."
    )

    cluster = management.get(CORE, "Cluster", "c1", NS)
    assert cluster["metadata"]["labels"] == {"nvke.io/cluster": "c1"}
    assert cluster["spec"]["infrastructureRef"] == {
        "apiGroup": capi.INFRA,
        "kind": "FakeCluster",
        "name": "c1",
    }
    assert cluster["spec"]["controlPlaneRef"] == {
        "apiGroup": capi.CONTROL_PLANE,
        "kind": "KubeadmControlPlane",
        "name": "c1-control-plane",
    }
    control_plane = management.get(KCP, "KubeadmControlPlane", "c1-control-plane", NS)
    assert control_plane["spec"]["replicas"] == 3
    assert control_plane["spec"]["version"] == "v1.34.2"  # the release the setting names for 1.34
    assert control_plane["spec"]["machineTemplate"]["spec"]["infrastructureRef"] == {
        "apiGroup": capi.INFRA,
        "kind": "FakeMachineTemplate",
        "name": "control-plane",
    }
    infra = management.get(INFRA, "FakeCluster", "c1", NS)
    assert infra["spec"] == {"region": "eu-west-1", "network": "gpu-fabric"}  # the operator's template

    uids = {obj["metadata"]["uid"] for obj in (cluster, control_plane, infra)}
    management.clear_requests()
    with pytest.raises(ProvisioningInProgress):
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")  # a repeated step
    assert {r[0] for r in management.requests} == {"GET"}  # what exists is read, nothing written
    again = [
        management.get(*key, NS)
        for key in (
            (CORE, "Cluster", "c1"),
            (KCP, "KubeadmControlPlane", "c1-control-plane"),
            (INFRA, "FakeCluster", "c1"),
        )
    ]
    assert {obj["metadata"]["uid"] for obj in again} == uids


def test_provisioning_returns_nvke_s_own_token_once_the_control_plane_serves(
    capi_setting, management, cluster_api, workload
):
    with pytest.raises(ProvisioningInProgress) as waiting:  # no machines for the control plane yet
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert waiting.value.reason == "WaitingForControlPlane"
    assert "ControlPlaneInitialized is False" in waiting.value.message
    cluster_api.workloads["c1"] = workload
    management.settle()  # Cluster API sees its machines come up

    access = infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert access.endpoint == workload.url
    assert access.ca_bundle == workload.ca_bundle
    assert access.token != workload.token  # not the kubeconfig Secret's admin credential
    assert access.token in workload.store.tokens
    binding = workload.get("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "nvke-admin")
    assert binding["roleRef"]["name"] == "cluster-admin"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nvke-admin", "namespace": "kube-system"}
    ]
    assert infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34") == access  # idempotent

    ops = KubernetesOperations(
        ClusterRef("c1", access.endpoint, access.token, access.ca_bundle, "clusterapi")
    )
    assert ops.list_nodes() == []


def test_a_cluster_whose_control_plane_never_comes_up_keeps_waiting(capi_setting, cluster_api, workload):
    cluster_api.workloads["c1"] = workload
    cluster_api.hold.add("c1")
    with pytest.raises(ProvisioningInProgress) as waiting:
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert waiting.value.reason == "WaitingForControlPlane"
    assert "ControlPlaneInitialized is False" in waiting.value.message
    assert workload.list("v1", "ServiceAccount", "kube-system") == []


def test_an_unknown_release_or_template_is_refused_before_anything_is_written(capi_setting, management):
    with pytest.raises(ProviderError) as refused:
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.31")
    assert refused.value.reason == "UnsupportedVersion"
    assert "1.31" in refused.value.message
    capi_setting.cluster_template = "FakeClusterTemplate/missing"
    capi_setting.save()
    with pytest.raises(ProviderError) as refused:
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert refused.value.reason == "NotFound"
    assert "FakeClusterTemplate nvke/missing" in refused.value.message
    assert management.list(CORE, "Cluster", NS) == []
    assert management.list(KCP, "KubeadmControlPlane", NS) == []


def test_without_a_management_cluster_the_provider_says_so(db):
    with pytest.raises(ProviderError) as refused:
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert refused.value.reason == "NotConfigured"


def test_a_pool_is_a_machine_deployment_with_its_bootstrap_and_health_check(
    provisioned, management, workload
):
    result = infrastructure().scale_pool(pool_spec(), 2)
    assert (result.nodes, result.wanted, result.complete) == (2, 2, True)

    deployment = management.get(CORE, "MachineDeployment", "c1-train", NS)
    labels = {"cluster.x-k8s.io/cluster-name": "c1", "nvke.io/cluster": "c1", "nvke.io/pool": "train"}
    assert deployment["metadata"]["annotations"] == {
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "6",
    }
    spec = deployment["spec"]
    assert (spec["clusterName"], spec["replicas"], spec["selector"]) == ("c1", 2, {"matchLabels": labels})
    assert spec["rollout"] == {"strategy": {"type": "OnDelete"}}  # NVKE paces replacements, not Cluster API
    assert spec["template"]["metadata"]["labels"] == {**labels, "nvke.io/gpu-model": "h100-sxm5-80gb"}
    assert spec["template"]["spec"]["version"] == "v1.34.2"
    assert spec["template"]["spec"]["infrastructureRef"] == {
        "apiGroup": capi.INFRA,
        "kind": "FakeMachineTemplate",
        "name": "gpu-h100",  # the template labelled with the pool's GPU model
    }
    assert spec["template"]["spec"]["bootstrap"]["configRef"]["name"] == "c1-train"

    cluster_uid = management.get(CORE, "Cluster", "c1", NS)["metadata"]["uid"]
    template = management.get(BOOTSTRAP, "KubeadmConfigTemplate", "c1-train", NS)
    assert template["metadata"]["ownerReferences"][0]["uid"] == cluster_uid
    registration = template["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
    assert registration["kubeletExtraArgs"] == [
        {"name": "node-labels", "value": "nvke.io/pool=train,nvke.io/sharing-mode=exclusive"}
    ]
    assert registration["taints"] == [{"key": "nvke.io/pool", "value": "train", "effect": "NoSchedule"}]
    check = management.get(CORE, "MachineHealthCheck", "c1-train", NS)
    assert check["metadata"]["ownerReferences"][0]["uid"] == cluster_uid
    assert check["spec"]["selector"] == {"matchLabels": labels}
    assert check["spec"]["checks"]["unhealthyNodeConditions"] == [
        {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300},
        {"type": "Ready", "status": "False", "timeoutSeconds": 300},
    ]
    assert check["status"]["expectedMachines"] == 2

    ops = KubernetesOperations(
        ClusterRef("c1", provisioned.endpoint, provisioned.token, provisioned.ca_bundle)
    )
    nodes = ops.list_nodes("train")
    assert [(n.pool, len(n.gpus), n.ready) for n in nodes] == [("train", 8, True)] * 2
    # Named as a MachineSet names its Machines, each Node as its Machine.
    machines = management.list(CORE, "Machine", NS, label_selector="nvke.io/pool=train")
    assert sorted(n.name for n in nodes) == sorted(m["status"]["nodeRef"]["name"] for m in machines)
    assert all(re.fullmatch(r"c1-train-[a-z0-9]{5}", n.name) for n in nodes)


def test_a_pool_waits_for_its_machines_and_says_how_many_are_ready(provisioned, cluster_api):
    cluster_api.pending.add("c1-train")
    result = infrastructure().scale_pool(pool_spec(), 2)
    assert (result.nodes, result.wanted, result.reason) == (0, 2, "WaitingForMachines")
    assert result.message == (
        "MachineDeployment c1-train: 0 of 2 machines ready (0 available replicas, at least 2 required)."
    )


def node_names(workload) -> list[str]:
    return [n["metadata"]["name"] for n in workload.list("v1", "Node")]


def test_scaling_changes_the_replicas_and_autoscaler_bounds_in_place(provisioned, management, workload):
    infrastructure().scale_pool(pool_spec(), 1)
    first = node_names(workload)
    infrastructure().scale_pool(pool_spec(), 2)
    uid = management.get(CORE, "MachineDeployment", "c1-train", NS)["metadata"]["uid"]
    result = infrastructure().scale_pool(pool_spec(max_nodes=4), 1)
    assert (result.nodes, result.wanted) == (1, 1)
    deployment = management.get(CORE, "MachineDeployment", "c1-train", NS)
    assert deployment["metadata"]["uid"] == uid
    assert deployment["spec"]["replicas"] == 1
    assert (
        deployment["metadata"]["annotations"]["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"]
        == "4"
    )
    assert node_names(workload) == first  # the newest went (the fake's deletion order)

    management.clear_requests()
    infrastructure().scale_pool(pool_spec(max_nodes=4), 1)  # nothing to change: five reads
    assert [r[0] for r in management.requests] == ["GET"] * 5


def test_a_gpu_model_without_a_machine_template_is_refused_and_nothing_is_made(provisioned, management):
    with pytest.raises(ProviderError) as refused:
        infrastructure().scale_pool(pool_spec(gpu_model="b200-sxm-180gb"), 2)
    assert refused.value.reason == "NoMachineTemplate"
    assert "nvke.io/gpu-model=b200-sxm-180gb" in refused.value.message
    assert management.list(CORE, "MachineDeployment", NS) == []
    assert management.list(BOOTSTRAP, "KubeadmConfigTemplate", NS) == []


def test_deleting_a_pool_then_the_cluster_removes_what_was_made(provisioned, management, workload):
    infrastructure().scale_pool(pool_spec(), 2)
    infrastructure().scale_pool(pool_spec("infer", labels={"nvke.io/pool": "infer"}), 1)
    infrastructure().delete_pool("c1", "train")
    assert [md["metadata"]["name"] for md in management.list(CORE, "MachineDeployment", NS)] == ["c1-infer"]
    assert [t["metadata"]["name"] for t in management.list(BOOTSTRAP, "KubeadmConfigTemplate", NS)] == [
        "c1-infer"
    ]
    assert [name.rpartition("-")[0] for name in node_names(workload)] == ["c1-infer"]
    infrastructure().delete_pool("c1", "train")  # already gone: no error

    infrastructure().delete_cluster("c1")
    management.settle()
    for api_version, kind in (
        (CORE, "Cluster"),
        (CORE, "MachineDeployment"),
        (CORE, "MachineHealthCheck"),
        (KCP, "KubeadmControlPlane"),
        (BOOTSTRAP, "KubeadmConfigTemplate"),
        (INFRA, "FakeCluster"),
    ):
        assert management.list(api_version, kind, NS) == [], kind
    assert management.get("v1", "Secret", "c1-kubeconfig", NS) is None
    infrastructure().delete_cluster("c1")


def test_the_management_kubeconfig_is_stored_encrypted(capi_setting):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT kubeconfig FROM clusterapi_managementcluster WHERE id = %s", [capi_setting.pk])
        stored = cursor.fetchone()[0]
    assert stored.startswith("fernet:")
    assert "token" not in stored and base64.b64encode(b"apiVersion").decode() not in stored


def test_the_kubeconfig_may_come_from_the_file_the_environment_names(
    capi_setting, cluster_api, workload, settings, tmp_path
):
    path = tmp_path / "management.kubeconfig"
    path.write_text(capi_setting.kubeconfig)
    capi_setting.kubeconfig = ""
    capi_setting.save()
    with pytest.raises(ProviderError) as refused:
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert refused.value.reason == "NotConfigured"
    settings.NVKE_CAPI_KUBECONFIG = str(tmp_path / "missing")
    with pytest.raises(ProviderError) as refused:
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert (refused.value.reason, "missing" in refused.value.message) == ("NotConfigured", True)
    settings.NVKE_CAPI_KUBECONFIG = str(path)
    cluster_api.workloads["c1"] = workload
    assert infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34").endpoint == workload.url


def test_a_kubeconfig_that_is_not_one_is_refused_by_name(capi_setting):
    capi_setting.kubeconfig = "clusters: [oops"
    capi_setting.save()
    with pytest.raises(ProviderError) as refused:
        infrastructure().provision_cluster("c1", "eu-west-1", 3, "1.34")
    assert refused.value.reason == "InvalidKubeconfig"


def test_repairing_a_node_has_cluster_api_replace_its_machine(provisioned, management, workload):
    infrastructure().scale_pool(pool_spec(), 2)
    sick, well = node_names(workload)
    assert infrastructure().repair_node("c1", "train", sick) is True
    management.settle()
    machines = management.list(CORE, "Machine", NS)
    # remediated, and made again by its MachineDeployment: a Machine and Node of another name
    assert len(machines) == 2 and sick not in node_names(workload) and well in node_names(workload)
    assert all(m["metadata"].get("annotations") is None for m in machines)
    assert infrastructure().repair_node("c1", "train", "not-a-node") is False


def test_a_chosen_node_is_marked_for_cluster_api_to_remove_first(
    provisioned, management, workload, cluster_api
):
    """The autoscaler drains one node and shrinks the pool by one: that node's Machine gets Cluster API's
    delete-machine annotation before the replicas go down, which every MachineSet deletion policy
    removes first (the cluster-autoscaler's own way of removing a chosen node)."""
    assert infrastructure().removes_chosen_nodes
    infrastructure().scale_pool(pool_spec(), 3)
    management.settle()
    oldest, other, newest = sorted(node_names(workload), key=cluster_api.born.get)
    management.clear_requests()
    infrastructure().scale_pool(pool_spec(remove_first=(oldest,)), 2)
    marked = [r for r in management.requests if r[0] == "PATCH" and "/machines/" in r[1]]
    assert [r[1].rpartition("/")[2] for r in marked] == [oldest]
    # The fake's own order would have removed the newest; the annotation made it remove the chosen one.
    assert sorted(node_names(workload)) == sorted([other, newest])
    assert management.get(CORE, "MachineDeployment", "c1-train", NS)["spec"]["replicas"] == 2
