"""The nvke-agent manifest of an attached cluster: valid Kubernetes (checked offline and by applying it
to the fake API server), one working node token per NVKE node, and for owners and admins only."""

import kubernetes
import kubernetes_validate
import pytest
import yaml
from kubernetes.client.rest import ApiException

from nodepools.models import Node
from nvke.agent import kubelet
from nvke.agent import mps as mps_module
from nvke.agent.node_side import node_pods
from telemetry import ingest
from tests.kubeapi import accounts, objects
from tests.kubeapi.fixtures import client_configuration

pytestmark = pytest.mark.django_db


@pytest.fixture
def attached(attach, gpu_cluster, make_attached_pool):
    cluster = attach(gpu_cluster)
    make_attached_pool(cluster, 3)
    return cluster


def test_the_manifest_installs_the_agent_with_a_working_token_per_node(api, attached, gpu_cluster):
    answer = api.post(f"/api/v1/clusters/{attached.pk}/agent-manifest/")
    assert answer.status_code == 200, answer.content
    assert answer["Cache-Control"] == "no-store"
    manifest = yaml.safe_load(answer.content)
    for item in manifest["items"]:
        kubernetes_validate.validate(item, "1.34.0", strict=True)
    secret, daemonset = manifest["items"][0], manifest["items"][-1]
    assert sorted(secret["stringData"]) == ["gpu-a", "gpu-b", "gpu-c"]
    for node, token in secret["stringData"].items():
        assert ingest.authenticate(token).node_id == Node.objects.get(pool__cluster=attached, name=node).pk
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "NVKE_URL", "value": "http://testserver"} in container["env"]
    assert gpu_cluster.get("v1", "Namespace", "nvke-system"), "attaching applied NVKE's access manifest"
    for item in manifest["items"]:  # the fake API server validates each against the official schema
        gpu_cluster.create(item)


def test_a_new_manifest_replaces_the_old_tokens(api, attached):
    first = yaml.safe_load(api.post(f"/api/v1/clusters/{attached.pk}/agent-manifest/").content)
    api.post(f"/api/v1/clusters/{attached.pk}/agent-manifest/")
    with pytest.raises(ingest.InvalidNodeToken):
        ingest.authenticate(first["items"][0]["stringData"]["gpu-a"])


def test_a_provisioned_cluster_has_no_agent_manifest(api, make_cluster, owner):
    cluster = make_cluster(owner.memberships.get().tenant)
    answer = api.post(f"/api/v1/clusters/{cluster.pk}/agent-manifest/")
    assert answer.status_code == 400 and answer.json()["code"] == "not_attached"


def test_members_may_not_issue_node_tokens(client_for, make_member, attached):
    member = make_member("acme", "member")
    assert client_for(member).post(f"/api/v1/clusters/{attached.pk}/agent-manifest/").status_code == 403


def _by_kind(manifest: dict) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for item in manifest["items"]:
        kinds.setdefault(item["kind"], []).append(item)
    return kinds


def _pod_spec(daemonset: dict) -> dict:
    return daemonset["spec"]["template"]["spec"]


def test_the_agent_serves_the_device_plugin_and_on_mps_nodes_the_daemons(api, attached):
    """Every NVKE node runs the device plugin; only nodes NVKE labelled as an MPS pool's also run MPS,
    with the pipe directory on the host where the plugin's Allocate mounts it into pods."""
    kinds = _by_kind(yaml.safe_load(api.post(f"/api/v1/clusters/{attached.pk}/agent-manifest/").content))
    plain, mps = sorted(kinds["DaemonSet"], key=lambda d: d["metadata"]["name"])
    assert (plain["metadata"]["name"], mps["metadata"]["name"]) == ("nvke-agent", "nvke-agent-mps")
    for daemonset, mode_operator in ((plain, "NotIn"), (mps, "In")):
        spec = _pod_spec(daemonset)
        assert spec["serviceAccountName"] == "nvke-agent"
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert {"key": "nvke.io/sharing-mode", "operator": mode_operator, "values": ["mps"]} in terms[
            "nodeSelectorTerms"
        ][0]["matchExpressions"]
        container = spec["containers"][0]
        assert "exec nvke-agent --device-plugin" in container["command"][-1]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
        assert mounts["device-plugins"] == volumes["device-plugins"] == kubelet.DEVICE_PLUGIN_PATH.rstrip("/")
    assert "--mps" not in _pod_spec(plain)["containers"][0]["command"][-1]
    assert _pod_spec(mps)["containers"][0]["command"][-1].endswith("--device-plugin --mps")
    mps_mounts = {m["name"]: m["mountPath"] for m in _pod_spec(mps)["containers"][0]["volumeMounts"]}
    mps_volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in _pod_spec(mps)["volumes"]}
    assert mps_mounts["mps"] == mps_volumes["mps"] == mps_module.ROOT
    # the daemons' /dev/shm is a host directory the device plugin mounts into MPS clients: no host IPC
    assert mps_mounts["mps-shm"] == mps_module.SHM_MOUNT and mps_volumes["mps-shm"] == mps_module.SHM
    assert "hostIPC" not in _pod_spec(mps) and "mps-shm" not in str(_pod_spec(plain))
    for daemonset in (plain, mps):  # root, for the kubelet's device-plugins directory
        assert _pod_spec(daemonset)["containers"][0]["securityContext"]["runAsUser"] == 0


def test_the_agents_account_lists_its_nodes_pods_and_nothing_more(api, attached, gpu_cluster):
    """The RBAC the manifest grants lets the plugin make the very call it makes (node_side.node_pods:
    pods of all namespaces, field selector spec.nodeName), and refuses anything else."""
    manifest = yaml.safe_load(api.post(f"/api/v1/clusters/{attached.pk}/agent-manifest/").content)
    (role,) = _by_kind(manifest)["ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    for item in manifest["items"]:
        gpu_cluster.create(item)
    token_secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": "nvke-agent-token",
            "namespace": "nvke-system",
            "annotations": {"kubernetes.io/service-account.name": "nvke-agent"},
        },
    }
    gpu_cluster.create(token_secret)
    gpu_cluster.create(objects.pod("here", namespace="nvke-system", node="gpu-a"))
    gpu_cluster.create(objects.pod("elsewhere", node="gpu-b"))
    token = accounts.token(gpu_cluster, "nvke-system", "nvke-agent-token")
    with kubernetes.client.ApiClient(client_configuration(gpu_cluster, token=token)) as agent:
        listed = node_pods(agent, "gpu-a")()
        assert "here" in [p["metadata"]["name"] for p in listed]
        assert {p["spec"]["nodeName"] for p in listed} == {"gpu-a"}, "elsewhere is on gpu-b"
        with pytest.raises(ApiException) as refused:
            kubernetes.client.CoreV1Api(agent).list_namespaced_secret("nvke-system")
        assert refused.value.status == 403
