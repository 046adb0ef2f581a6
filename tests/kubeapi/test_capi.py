"""The fake's Cluster API, at Kubernetes 1.34 and 1.36: the upstream v1beta2 CRDs validate what clients
write, and the simulated controllers provision control planes, machines and nodes, report status, and
collect what a deleted cluster owned."""

import base64
import json
import re

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from . import capi
from .capi_actors import ClusterAPI
from .fixtures import client_configuration
from .server import FakeKubeApi

NS = "nvke"


@pytest.fixture(params=["1.34.2", "1.36.0"])
def kubeapi(request):
    """The management cluster's API server, at each Kubernetes minor the scenarios run at."""
    with FakeKubeApi(version=request.param) as server:
        yield server


@pytest.fixture
def management(kubeapi):
    capi.install(kubeapi, NS)
    return kubeapi


@pytest.fixture
def workload(kubeapi):
    with FakeKubeApi(version=kubeapi.version, token="workload-admin") as server:
        yield server


@pytest.fixture
def custom(kube_client):
    return kubernetes.client.CustomObjectsApi(kube_client)


def ref(group, kind, name):
    return {"apiGroup": group, "kind": kind, "name": name}


def cluster_objects(name="c1", replicas=3):
    infra = {
        "apiVersion": f"{capi.INFRA}/v1beta2",
        "kind": "FakeCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"region": "eu-west-1"},
    }
    control_plane = {
        "apiVersion": f"{capi.CONTROL_PLANE}/v1beta2",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": f"{name}-control-plane", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "version": "v1.34.2",
            "machineTemplate": {
                "spec": {"infrastructureRef": ref(capi.INFRA, "FakeMachineTemplate", "control-plane")}
            },
        },
    }
    cluster = {
        "apiVersion": f"{capi.CORE}/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "infrastructureRef": ref(capi.INFRA, "FakeCluster", name),
            "controlPlaneRef": ref(capi.CONTROL_PLANE, "KubeadmControlPlane", f"{name}-control-plane"),
        },
    }
    return infra, control_plane, cluster


def create(custom, obj):
    group, version = obj["apiVersion"].split("/")
    plural = obj["kind"].lower() + "s"
    return custom.create_namespaced_custom_object(group, version, NS, plural, obj)


def condition(obj, kind):
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == kind), None)


def test_an_undeclared_field_is_refused_naming_it(management, custom):
    _, control_plane, _ = cluster_objects()
    control_plane["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["apiVersion"] = (
        "v1beta1"  # v1beta1's shape
    )
    with pytest.raises(ApiException) as refused:
        create(custom, control_plane)
    assert refused.value.status == 422
    assert "spec.machineTemplate.spec.infrastructureRef.apiVersion" in refused.value.body


def test_a_required_field_is_refused_when_missing(management, custom):
    _, _, cluster = cluster_objects()
    deployment = {
        "apiVersion": f"{capi.CORE}/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": "md", "namespace": NS},
        "spec": {"clusterName": "c1", "template": {"spec": {"clusterName": "c1", "bootstrap": {}}}},
    }
    with pytest.raises(ApiException) as refused:
        create(custom, deployment)
    assert refused.value.status == 422
    assert "spec.selector" in refused.value.body and "infrastructureRef" in refused.value.body


def test_a_control_plane_comes_up_with_its_kubeconfig(management, workload, custom):
    simulated = ClusterAPI(management, NS)
    for obj in cluster_objects():
        create(custom, obj)
    cluster = management.get(f"{capi.CORE}/v1beta2", "Cluster", "c1", NS)
    assert condition(cluster, "ControlPlaneAvailable")["status"] == "False"  # no machines to run it on yet
    assert management.get("v1", "Secret", "c1-kubeconfig", NS) is None

    simulated.workloads["c1"] = workload
    management.settle()
    cluster = management.get(f"{capi.CORE}/v1beta2", "Cluster", "c1", NS)
    assert cluster["status"]["initialization"] == {
        "infrastructureProvisioned": True,
        "controlPlaneInitialized": True,
    }
    assert condition(cluster, "Available")["status"] == "True"
    assert cluster["status"]["controlPlane"]["availableReplicas"] == 3
    control_plane = management.get(
        f"{capi.CONTROL_PLANE}/v1beta2", "KubeadmControlPlane", "c1-control-plane", NS
    )
    assert control_plane["metadata"]["ownerReferences"][0]["uid"] == cluster["metadata"]["uid"]

    secret = management.get("v1", "Secret", "c1-kubeconfig", NS)
    config = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
    assert config["clusters"][0]["cluster"]["server"] == workload.url
    assert set(config["users"][0]["user"]) == {"client-certificate-data", "client-key-data"}  # as kubeadm's
    with kubernetes.config.new_client_from_config_dict(config) as api:  # the official loader
        assert kubernetes.client.CoreV1Api(api).list_namespace().items


def test_machines_become_gpu_nodes_and_go_with_their_cluster(management, workload, custom):
    ClusterAPI(management, NS).workloads["c1"] = workload
    for obj in cluster_objects():
        create(custom, obj)
    management.create(capi.machine_template("h100", gpu={"product": "NVIDIA-H100-80GB-HBM3", "count": 8}))
    create(
        custom,
        {
            "apiVersion": f"{capi.BOOTSTRAP}/v1beta2",
            "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "c1-gpu", "namespace": NS},
            "spec": {
                "template": {
                    "spec": {
                        "joinConfiguration": {
                            "nodeRegistration": {
                                "kubeletExtraArgs": [{"name": "node-labels", "value": "nvke.io/pool=gpu"}],
                                "taints": [{"key": "nvke.io/pool", "value": "gpu", "effect": "NoSchedule"}],
                            }
                        }
                    }
                }
            },
        },
    )
    labels = {"cluster.x-k8s.io/cluster-name": "c1", "nvke.io/pool": "gpu"}
    deployment = create(
        custom,
        {
            "apiVersion": f"{capi.CORE}/v1beta2",
            "kind": "MachineDeployment",
            "metadata": {"name": "c1-gpu", "namespace": NS},
            "spec": {
                "clusterName": "c1",
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "clusterName": "c1",
                        "version": "v1.34.2",
                        "bootstrap": {"configRef": ref(capi.BOOTSTRAP, "KubeadmConfigTemplate", "c1-gpu")},
                        "infrastructureRef": ref(capi.INFRA, "FakeMachineTemplate", "h100"),
                    },
                },
            },
        },
    )

    def machines() -> dict[str, str]:
        """Machine name -> its version; each Machine's Node has its name."""
        found = management.list(f"{capi.CORE}/v1beta2", "Machine", NS)
        return {m["metadata"]["name"]: m["spec"]["version"] for m in found}

    nodes = workload.list("v1", "Node")
    first = machines()
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(first)
    assert all(re.fullmatch(r"c1-gpu-[a-z0-9]{5}", name) for name in first)
    assert nodes[0]["status"]["nodeInfo"]["kubeletVersion"] == "v1.34.2"
    assert nodes[0]["metadata"]["labels"]["nvke.io/pool"] == "gpu"
    assert nodes[0]["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert nodes[0]["spec"]["taints"] == [{"key": "nvke.io/pool", "value": "gpu", "effect": "NoSchedule"}]
    status = management.get(f"{capi.CORE}/v1beta2", "MachineDeployment", "c1-gpu", NS)["status"]
    assert (status["replicas"], status["readyReplicas"]) == (2, 2)

    custom.patch_namespaced_custom_object(
        capi.CORE,
        "v1beta2",
        NS,
        "machinedeployments",
        deployment["metadata"]["name"],
        {"spec": {"replicas": 1}},
    )
    kept = [n["metadata"]["name"] for n in workload.list("v1", "Node")]
    assert kept == list(machines()) and kept[0] in first

    # A changed template: the default rollout strategy (RollingUpdate) replaces the Machine at once, with
    # a Machine (and Node) of a new name; under OnDelete only a deleted Machine comes back changed.
    def template_version(version: str, strategy: str) -> None:
        rollout = {"strategy": {"type": strategy}}
        patch = {"spec": {"rollout": rollout, "template": {"spec": {"version": version}}}}
        custom.patch_namespaced_custom_object(capi.CORE, "v1beta2", NS, "machinedeployments", "c1-gpu", patch)

    template_version("v1.35.1", "RollingUpdate")
    rolled = machines()
    assert list(rolled.values()) == ["v1.35.1"] and set(rolled).isdisjoint(first)
    assert [n["metadata"]["name"] for n in workload.list("v1", "Node")] == list(rolled)
    template_version("v1.36.0", "OnDelete")
    assert machines() == rolled
    custom.delete_namespaced_custom_object(capi.CORE, "v1beta2", NS, "machines", list(rolled)[0])
    management.settle()
    assert list(machines().values()) == ["v1.36.0"] and set(machines()).isdisjoint(rolled)

    custom.delete_namespaced_custom_object(capi.CORE, "v1beta2", NS, "clusters", "c1")
    management.settle()
    for api_version, kind in (
        (f"{capi.CORE}/v1beta2", "MachineDeployment"),
        (f"{capi.CORE}/v1beta2", "Machine"),
        (f"{capi.CONTROL_PLANE}/v1beta2", "KubeadmControlPlane"),
        (f"{capi.INFRA}/v1beta2", "FakeCluster"),
    ):
        assert management.list(api_version, kind, NS) == [], kind
    assert management.get("v1", "Secret", "c1-kubeconfig", NS) is None
    assert workload.list("v1", "Node") == []


def test_the_token_controller_issues_a_token_the_server_accepts(kubeapi, kube_client):
    core = kubernetes.client.CoreV1Api(kube_client)
    core.create_namespaced_service_account("kube-system", {"metadata": {"name": "nvke"}})
    core.create_namespaced_secret(
        "kube-system",
        {
            "metadata": {"name": "nvke-token", "annotations": {"kubernetes.io/service-account.name": "nvke"}},
            "type": "kubernetes.io/service-account-token",
        },
    )
    data = core.read_namespaced_secret("nvke-token", "kube-system").data
    token = base64.b64decode(data["token"]).decode()
    assert base64.b64decode(data["ca.crt"]).decode() == kubeapi.ca_bundle
    with kubernetes.client.ApiClient(client_configuration(kubeapi, token=token)) as api:
        # accepted: it may read /version (system:discovery); RBAC names it in a 403 on what it may not do
        assert kubernetes.client.VersionApi(api).get_code().major == "1"
        with pytest.raises(ApiException) as forbidden:
            kubernetes.client.CoreV1Api(api).list_namespace()
        assert forbidden.value.status == 403
        assert 'User "system:serviceaccount:kube-system:nvke"' in json.loads(forbidden.value.body)["message"]
    with kubernetes.client.ApiClient(client_configuration(kubeapi, token="guessed")) as api:  # nor a guess
        with pytest.raises(ApiException) as refused:
            kubernetes.client.CoreV1Api(api).list_namespace()
    assert refused.value.status == 401
