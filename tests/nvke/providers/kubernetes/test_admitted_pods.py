"""A user's GPU pod on Kubernetes 1.36, end to end through NVKE's admission policies: created without
NVKE's gate or toleration, it is held from creation (MutatingAdmissionPolicy), NVKE allocates its claim and
lifts the gate as its service account (which the ValidatingAdmissionPolicy lets it do)."""

import pytest
from kubernetes import client

from claims.models import Claim
from claims.workloads import sync_workloads
from nvke.agent import allocation
from nvke.providers.kubernetes import admission, dra
from tests.kubeapi import accounts, objects
from tests.kubeapi.fixtures import client_configuration
from tests.kubeapi.kube_scheduler import DELETE_PROTECTION
from tests.kubeapi.server import FakeKubeApi

from .test_workloads import a10_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster_1_36():
    with FakeKubeApi(version="1.36.0") as server:
        yield server


def test_a_users_pod_is_held_from_creation_and_released_by_nvke(cluster_1_36, attach, sharing_pool):
    a10_cluster(cluster_1_36)
    cluster = attach(cluster_1_36)  # applies NVKE's policies: both, at 1.36
    sharing_pool(cluster, "time-slicing")
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": dra.DEVICE_CLASS, "capacity": {"requests": {"memory": "4Gi"}}},
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "notebook"},
        "spec": {"devices": {"requests": [request]}},
    }
    pod = objects.pod("notebook", namespace="ml")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "notebook"}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    with client.ApiClient(client_configuration(cluster_1_36)) as api:
        client.ResourceV1Api(api).create_namespaced_resource_claim("ml", claim)
        client.CoreV1Api(api).create_namespaced_pod("ml", pod)
    held = cluster_1_36.get("v1", "Pod", "notebook", "ml")["spec"]
    assert held["schedulingGates"] == [{"name": dra.GATE}] and held["tolerations"] == [admission.TOLERATION]

    sync_workloads(cluster.pk)

    assert Claim.objects.get(name="notebook").status == "allocated"
    released = cluster_1_36.get("v1", "Pod", "notebook", "ml")["spec"]
    assert "schedulingGates" not in released, "NVKE's service account lifted the gate past the policy"
    assert released["tolerations"] == [admission.TOLERATION]


def test_a_users_shared_gpu_pod_gets_a_device_plugin_slot_and_the_plugin_finds_it(
    cluster_1_36, attach, sharing_pool
):
    """A pod asking a GPU share, created as a user writes it, is sent to NVKE's scheduler with one slot of
    NVKE's device plugin on its GPU container; once NVKE binds it, the plugin's Allocate for one slot on
    that node resolves to it, with its GPU."""
    a10_cluster(cluster_1_36)
    cluster = attach(cluster_1_36)
    sharing_pool(cluster, "time-slicing")
    pod = objects.pod("infer", namespace="ml")
    limits = {"nvidia.com/gpu-memory": "2Gi", "nvidia.com/gpu-utilization": "20"}
    pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    with client.ApiClient(client_configuration(cluster_1_36)) as api:
        client.CoreV1Api(api).create_namespaced_pod("ml", pod)
    admitted = cluster_1_36.get("v1", "Pod", "infer", "ml")
    assert admitted["spec"]["schedulerName"] == admission.SCHEDULER
    assert admitted["spec"]["containers"][0]["resources"]["limits"] == {**limits, allocation.RESOURCE: "1"}

    sync_workloads(cluster.pk)

    bound = cluster_1_36.get("v1", "Pod", "infer", "ml")
    node = bound["spec"]["nodeName"]
    # As the plugin lists them when the kubelet calls Allocate: bound, not yet started (the stand-in's
    # kubelet has since started the pod, having no device plugin to ask).
    on_node = [
        {**p, "status": {"phase": "Pending"}}
        for p in cluster_1_36.list("v1", "Pod")
        if p["spec"].get("nodeName") == node
    ]
    grant = allocation.resolve(on_node, 1, set(), str)
    assert grant.pod == "ml/infer"
    assert dict(grant.envs)["NVIDIA_VISIBLE_DEVICES"] == bound["metadata"]["annotations"][allocation.UUIDS]


def test_a_pod_of_another_dra_driver_is_released_by_nvke_and_placed_by_kube_scheduler(
    cluster_1_36, attach, sharing_pool
):
    """NVKE's admission gates every pod with claims in a managed namespace (it cannot read the claims);
    one none of whose claims asks an NVIDIA DeviceClass is released by NVKE's pass, told so, and
    kube-scheduler allocates its claim from the other driver's slice and binds it."""
    a10_cluster(cluster_1_36)
    cluster = attach(cluster_1_36)
    sharing_pool(cluster, "time-slicing")
    driver = "fpga.example.com"
    selector = {"cel": {"expression": f"device.driver == '{driver}'"}}
    cluster_1_36.create(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": driver},
         "spec": {"selectors": [selector]}}
    )  # fmt: skip
    cluster_1_36.create(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"cpu-0-{driver}"},
         "spec": {"driver": driver, "nodeName": "cpu-0", "devices": [{"name": "fpga-0"}],
                  "pool": {"name": "cpu-0", "generation": 1, "resourceSliceCount": 1}}}
    )  # fmt: skip
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "fpga"},
        "spec": {"devices": {"requests": [{"name": "fpga", "exactly": {"deviceClassName": driver}}]}},
    }
    pod = objects.pod("encode", namespace="ml")
    pod["spec"]["resourceClaims"] = [{"name": "fpga", "resourceClaimName": "fpga"}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "fpga"}]}
    rules = [
        {"apiGroups": ["", "resource.k8s.io"], "resources": ["pods", "resourceclaims"], "verbs": ["create"]}
    ]
    user = accounts.grant(cluster_1_36, rules, name="encoder", namespace="ml")
    with client.ApiClient(client_configuration(cluster_1_36, token=user)) as api:
        client.ResourceV1Api(api).create_namespaced_resource_claim("ml", claim)
        client.CoreV1Api(api).create_namespaced_pod("ml", pod)
    assert cluster_1_36.get("v1", "Pod", "encode", "ml")["spec"]["schedulingGates"] == [{"name": dra.GATE}]

    sync_workloads(cluster.pk)

    placed = cluster_1_36.get("v1", "Pod", "encode", "ml")
    assert "schedulingGates" not in placed["spec"] and placed["spec"]["nodeName"] == "cpu-0"
    allocated = cluster_1_36.get("resource.k8s.io/v1", "ResourceClaim", "fpga", "ml")
    assert [(r["driver"], r["device"]) for r in allocated["status"]["allocation"]["devices"]["results"]] == [
        (driver, "fpga-0")
    ]
    assert DELETE_PROTECTION in allocated["metadata"]["finalizers"], "kube-scheduler's allocation"
    assert dra.FINALIZER not in allocated["metadata"]["finalizers"], "NVKE left the claim alone"
    said = [
        e["message"]
        for e in cluster_1_36.list("v1", "Event", "ml")
        if e["involvedObject"]["name"] == "encode" and e["reason"] == "OtherDriver"
    ]
    assert said == [
        "None of its ResourceClaims (fpga) asks an NVIDIA DeviceClass (gpu.nvidia.com, mig.nvidia.com): "
        f"NVKE lifted its scheduling gate {dra.GATE}, for kube-scheduler to place it."
    ]
    assert Claim.objects.filter(name="fpga").count() == 0, "NVKE adopted no other driver's claim"
