"""Claims reach workloads through DRA: NVKE's claims become ResourceClaims that NVKE allocates itself, a
user's ResourceClaims are adopted, gated pods are released once their claims are allocated, and nothing
another scheduler allocated is overwritten or double-booked. Against the fake API server, which checks
every object against the official schemas."""

import json

import pytest
from kubernetes import client

from claims.allocator.service import create_claim, evict_claims, release_claim, resize_claim
from claims.models import Claim
from claims.workloads import sync_workloads
from nodepools.models import Gpu
from nodepools.nodes import fail_gpu
from nvke.providers.kubernetes import dra, records
from nvke.providers.kubernetes.workloads import REASON
from nvke.quantity import parse_mib
from nvke.tenancy.models import Quota
from tests.kubeapi import objects
from tests.kubeapi.server import FakeKubeApi

from .access import nvke_token, ungranted

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["1.34.2", "1.36.0"])
def kubeapi(request):
    """The stand-in at the first minor serving resource.k8s.io/v1 and at one with its later gates."""
    with FakeKubeApi(request.param) as server:
        yield server


def a10_cluster(kubeapi, *, consumable: bool = True, nodes: int = 1):
    if consumable:  # the driver's consumable shares need KEP-5075's gate: alpha (off) on 1.34, beta on 1.36
        kubeapi.features.set("DRAConsumableCapacity", True)
    objects.gpu_operator(kubeapi)
    kubeapi.create(records.crd())  # NVKE's access manifest brings it
    kubeapi.create(objects.device_class())  # the DRA driver's chart brings it
    kubeapi.create(objects.cpu_node("cpu-0"))  # where the cluster's other pods run, untainted
    for i in range(nodes):
        node = objects.gpu_node(f"a10-{i}", product="NVIDIA-A10", count=1, memory_mib=23028)
        kubeapi.create(node)
        kubeapi.create(objects.resource_slice(node, 1, consumable=consumable))
    kubeapi.create(objects.namespace("ml", {dra.MANAGED: "true"}))
    kubeapi.settle()


@pytest.fixture
def a10_pool(kubeapi, attach, sharing_pool):
    """make(consumable, nodes) -> an attached cluster with a time-slicing A10 pool of `nodes` nodes."""

    def make(consumable: bool = True, nodes: int = 1):
        a10_cluster(kubeapi, consumable=consumable, nodes=nodes)
        cluster = attach(kubeapi)
        sharing_pool(cluster, "time-slicing", nodes=nodes)
        return cluster

    return make


def fraction(context, cluster, name, memory, percent, namespace="ml"):
    return create_claim(
        context=context,
        cluster=cluster,
        name=name,
        namespace=namespace,
        kind="fraction",
        gpu_memory_mib=parse_mib(memory),
        compute_percent=percent,
    )


def resource_claim(kubeapi, name, namespace="ml"):
    return kubeapi.get("resource.k8s.io/v1", "ResourceClaim", name, namespace)


def events(kubeapi, name, namespace="ml"):
    return [
        (e["reason"], e["message"])
        for e in kubeapi.list("v1", "Event", namespace)
        if e["involvedObject"]["name"] == name
    ]


def gated_pod(name, claim, namespace="ml"):
    """A pod using a claim, as NVKE's admission lets it into a managed namespace: gated, tolerating pools."""
    pod = objects.pod(name, namespace=namespace)
    pod["spec"].update(dra.admitted_pod_fields())
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return pod


def pod_of(kubeapi, name, namespace="ml"):
    return kubeapi.get("v1", "Pod", name, namespace)


def test_an_admitted_pod_is_reserved_bound_and_started_on_its_claims_node(kubeapi, a10_pool, context):
    cluster = a10_pool(consumable=True)
    claim = fraction(context, cluster, "train", "8Gi", 70)
    uid = kubeapi.create(gated_pod("train-pod", "train"))["metadata"]["uid"]

    sync_workloads(cluster.pk)

    rc = resource_claim(kubeapi, "train")
    assert rc["metadata"]["finalizers"] == [dra.FINALIZER] == ["nvke.io/allocation"]  # not kube-scheduler's
    assert rc["status"]["reservedFor"] == [{"resource": "pods", "name": "train-pod", "uid": uid}]
    pod = pod_of(kubeapi, "train-pod")
    assert (pod["spec"]["nodeName"], pod["status"]["phase"]) == (
        "a10-0",
        "Running",
    )  # kube-scheduler, kubelet
    written = rc["status"]["allocation"]

    kubeapi.delete("v1", "Pod", "train-pod", "ml")
    kubeapi.settle()
    rc = resource_claim(kubeapi, "train")  # the claim controller drops the pod, leaves NVKE's allocation
    assert "reservedFor" not in rc["status"] and rc["status"]["allocation"] == written
    release_claim(claim)
    sync_workloads(cluster.pk)
    assert resource_claim(kubeapi, "train") is None


def test_four_claims_share_one_a10_through_consumable_shares(kubeapi, a10_pool, context):
    cluster = a10_pool(consumable=True)
    fraction(context, cluster, "train", "8Gi", 70)
    for i in range(3):
        fraction(context, cluster, f"infer-{i}", "2Gi", 20)
    for name in ("train", "infer-0", "infer-1", "infer-2"):
        kubeapi.create(gated_pod(f"{name}-pod", name))
    kubeapi.clear_requests()

    sync_workloads(cluster.pk)

    assert ungranted(kubeapi.requests) == set()  # NVKE's access manifest lets it do all this

    results = {}
    for name in ("train", "infer-0", "infer-1", "infer-2"):
        rc = resource_claim(kubeapi, name)
        assert rc["metadata"]["labels"][dra.CLAIM_LABEL] == name
        assert dra.FINALIZER in rc["metadata"]["finalizers"]
        allocation = rc["status"]["allocation"]
        (result,) = allocation["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == ("gpu.nvidia.com", "a10-0", "gpu-0")
        results[name] = result
        selector = allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
        assert selector == {"key": "metadata.name", "operator": "In", "values": ["a10-0"]}
        assert "config" not in allocation["devices"]  # the driver refuses MPS across claims
        assert (
            "Allocated",
            f"NVKE allocated gpu-0 on node a10-0: {result['consumedCapacity']['memory']}"
            " of GPU memory, compute 10% guaranteed up to "
            f"{70 if name == 'train' else 20}% (time-slicing, isolation none).",
        ) in events(kubeapi, name)
    assert results["train"]["consumedCapacity"] == {"memory": "8Gi"}
    assert {r["consumedCapacity"]["memory"] for n, r in results.items() if n != "train"} == {"2Gi"}
    assert len({r["shareID"] for r in results.values()}) == 4
    for name in results:  # every pod may now be scheduled, to the node its claim selects
        released = kubeapi.get("v1", "Pod", f"{name}-pod", "ml")
        assert "schedulingGates" not in released["spec"]
        held = released["metadata"]["annotations"]
        assert held["nvke.io/gpu-memory"] == results[name]["consumedCapacity"]["memory"]
        assert held["nvke.io/gpu-utilization"] == ("70" if name == "train" else "20")
        ((reason, message),) = events(kubeapi, f"{name}-pod")
        assert reason == "Allocated" and message.startswith(f"NVKE allocated its GPU claims ({name}: GPU-")
        assert f"{held['nvke.io/gpu-memory']} of GPU memory" in message and "on node a10-0" in message
        # One patch ungates the pod and says what NVKE said (so that the next pass does not say it again)
        assert held[REASON] == f"{reason}: {message}"
        patches = [r for r in kubeapi.requests if r[0] == "PATCH" and r[1].endswith(f"/pods/{name}-pod")]
        assert len(patches) == 1
    assert {c.workload["state"] for c in Claim.objects.all()} == {"allocated"}
    assert all("consumable shares" in c.workload["message"] for c in Claim.objects.all())

    before = kubeapi.list("resource.k8s.io/v1", "ResourceClaim", "ml")
    sync_workloads(cluster.pk)  # a repeated pass changes nothing
    assert kubeapi.list("resource.k8s.io/v1", "ResourceClaim", "ml") == before


def test_without_consumable_shares_one_claim_holds_the_gpu_and_the_others_say_why(kubeapi, a10_pool, context):
    cluster = a10_pool(consumable=False)
    fraction(context, cluster, "train", "8Gi", 70)
    fraction(context, cluster, "infer", "2Gi", 20)
    kubeapi.create(gated_pod("infer-pod", "infer"))

    sync_workloads(cluster.pk)

    assert (
        resource_claim(kubeapi, "train")["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    )
    assert "allocation" not in (resource_claim(kubeapi, "infer").get("status") or {})
    infer = Claim.objects.get(name="infer")
    assert infer.workload["state"] == "waiting" and "ml/train" in infer.workload["message"]
    assert "--consumable-shares=memory" in infer.workload["message"]
    pod = kubeapi.get("v1", "Pod", "infer-pod", "ml")
    assert pod["spec"]["schedulingGates"] == [{"name": dra.GATE}]
    assert [r for r, m in events(kubeapi, "infer-pod") if "consumable" in m] == ["FailedScheduling"]
    sync_workloads(cluster.pk)  # said once, not on every pass
    assert len(events(kubeapi, "infer-pod")) == 1


def test_an_mps_claim_alone_on_its_gpu_carries_the_drivers_gpu_config(kubeapi, attach, sharing_pool, context):
    a10_cluster(kubeapi, consumable=False)
    cluster = attach(kubeapi)
    sharing_pool(cluster, "mps", name="mps")
    fraction(context, cluster, "serve", "6Gi", 40)

    sync_workloads(cluster.pk)

    (config,) = resource_claim(kubeapi, "serve")["status"]["allocation"]["devices"]["config"]
    assert config["source"] == "FromClaim" and config["requests"] == ["gpu"]
    assert config["opaque"] == {
        "driver": "gpu.nvidia.com",
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {
                "strategy": "MPS",
                "mpsConfig": {"defaultActiveThreadPercentage": 40, "defaultPinnedDeviceMemoryLimit": "6Gi"},
            },
        },
    }


def test_an_mps_claim_on_consumable_shares_says_isolation_none_wherever_kubectl_reads_it(
    kubeapi, attach, sharing_pool, context
):
    a10_cluster(kubeapi, consumable=True)
    cluster = attach(kubeapi)
    sharing_pool(cluster, "mps", name="mps")
    claim = fraction(context, cluster, "serve", "6Gi", 40)
    kubeapi.create(gated_pod("serve-pod", "serve"))

    sync_workloads(cluster.pk)

    assert claim.allocation.isolation == "memory-capped"  # what the pool's MPS would give it alone
    assert "config" not in resource_claim(kubeapi, "serve")["status"]["allocation"]["devices"]
    assert kubeapi.get("nvke.io/v1alpha1", "GPUAllocation", "serve", "ml")["spec"]["isolation"] == "none"
    assert (
        kubeapi.get("v1", "Pod", "serve-pod", "ml")["metadata"]["annotations"]["nvke.io/isolation"] == "none"
    )
    assert "isolation none" in dict(events(kubeapi, "serve"))["Allocated"]


def test_a_time_slicing_claim_alone_on_its_gpu_carries_the_drivers_time_slicing_config(
    kubeapi, a10_pool, context
):
    cluster = a10_pool(consumable=False)
    fraction(context, cluster, "serve", "6Gi", 40)

    sync_workloads(cluster.pk)

    (config,) = resource_claim(kubeapi, "serve")["status"]["allocation"]["devices"]["config"]
    assert config["opaque"]["parameters"]["sharing"] == {
        "strategy": "TimeSlicing",
        "timeSlicingConfig": {"interval": "Default"},
    }


def test_a_users_resource_claim_is_adopted_placed_and_released_when_deleted(kubeapi, kube_client, a10_pool):
    cluster = a10_pool(consumable=True, nodes=2)
    dra_api = client.ResourceV1Api(kube_client)
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "notebook", "annotations": {dra.COMPUTE: "30%", dra.PRIORITY: "5"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "capacity": {"requests": {"memory": "4Gi"}},
                        },
                    }
                ]
            }
        },
    }
    dra_api.create_namespaced_resource_claim("ml", body)
    elsewhere = {**body, "metadata": {"name": "elsewhere"}}
    kubeapi.create(objects.namespace("scratch"))
    dra_api.create_namespaced_resource_claim("scratch", elsewhere)

    sync_workloads(cluster.pk)

    claim = Claim.objects.get(name="notebook")
    assert (claim.source, claim.namespace, claim.kind, claim.status) == (
        "resourceclaim",
        "ml",
        "fraction",
        "allocated",
    )
    assert (claim.gpu_memory_mib, claim.compute_percent, claim.priority) == (4096, 30, 5)
    rc = resource_claim(kubeapi, "notebook")
    assert rc["metadata"]["annotations"][dra.ADOPTED] == "true"
    assert rc["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] == {"memory": "4Gi"}
    assert not Claim.objects.filter(name="elsewhere").exists()  # a namespace NVKE does not manage
    assert "status" not in resource_claim(kubeapi, "elsewhere", "scratch")

    dra_api.delete_namespaced_resource_claim("notebook", "ml")  # held by the finalizer until NVKE lets go
    sync_workloads(cluster.pk)
    assert not Claim.objects.filter(name="notebook").exists()
    sync_workloads(cluster.pk)
    assert resource_claim(kubeapi, "notebook") is None


def test_a_request_over_the_quota_is_refused_on_the_resource_claim(kubeapi, a10_pool, context):
    cluster = a10_pool(consumable=True)
    Quota.objects.update_or_create(tenant=context.tenant, defaults={"max_claim_gpu_memory_mib": 1024})
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "big", "namespace": "ml"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    kubeapi.create(body)

    sync_workloads(cluster.pk)

    assert not Claim.objects.filter(name="big").exists()
    ((reason, message),) = events(kubeapi, "big")
    assert reason == "NotPlaceable" and "quota" in message.lower()


def test_an_allocation_another_scheduler_wrote_is_left_alone_and_never_double_booked(
    kubeapi, kube_client, a10_pool, context
):
    cluster = a10_pool(consumable=False)
    theirs = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "theirs", "namespace": "ml"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    kubeapi.create(theirs)
    allocation = {
        "devices": {
            "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "a10-0", "device": "gpu-0"}]
        },
        "allocationTimestamp": "2026-12-01T00:00:00Z",
    }
    client.ResourceV1Api(kube_client).patch_namespaced_resource_claim_status(
        "theirs", "ml", {"status": {"allocation": allocation}}, _content_type="application/merge-patch+json"
    )
    fraction(context, cluster, "mine", "4Gi", 30)

    sync_workloads(cluster.pk)

    assert resource_claim(kubeapi, "theirs")["status"]["allocation"]["devices"] == allocation["devices"]
    assert "allocation" not in (resource_claim(kubeapi, "mine").get("status") or {})
    mine = Claim.objects.get(name="mine")
    assert mine.workload["state"] == "conflict" and "ml/theirs" in mine.workload["message"]
    ((reason, message),) = events(kubeapi, "theirs")  # reported where it is, too
    assert reason == "ForeignAllocation" and "gpu-0 on node a10-0" in message


def test_a_released_claim_withdraws_its_allocation_and_deletes_its_resource_claim(kubeapi, a10_pool, context):
    cluster = a10_pool(consumable=True)
    claim = fraction(context, cluster, "train", "8Gi", 70)
    sync_workloads(cluster.pk)
    assert resource_claim(kubeapi, "train")["status"]["allocation"]

    release_claim(claim)
    sync_workloads(cluster.pk)

    assert resource_claim(kubeapi, "train") is None


def test_a_claim_outside_its_tenants_managed_namespaces_waits_and_says_so(kubeapi, a10_pool, context):
    cluster = a10_pool(consumable=True)
    kubeapi.create(objects.namespace("team-b"))
    kubeapi.create(objects.namespace("globex", {dra.MANAGED: "true", dra.TENANT: "globex"}))
    fraction(context, cluster, "train", "8Gi", 70, namespace="team-b")
    fraction(context, cluster, "theirs", "2Gi", 20, namespace="globex")
    fraction(context, cluster, "fresh", "2Gi", 20, namespace="fresh")

    sync_workloads(cluster.pk)

    waiting = Claim.objects.get(name="train")
    assert waiting.workload["state"] == "waiting" and f"{dra.MANAGED}=true" in waiting.workload["message"]
    assert resource_claim(kubeapi, "train", "team-b") is None
    theirs = Claim.objects.get(name="theirs")
    assert theirs.workload["state"] == "waiting" and "another tenant" in theirs.workload["message"]
    assert resource_claim(kubeapi, "theirs", "globex") is None
    # a namespace that did not exist is created, managed by NVKE for this tenant
    labels = kubeapi.get("v1", "Namespace", "fresh")["metadata"]["labels"]
    assert (labels[dra.MANAGED], labels[dra.TENANT]) == ("true", "acme")
    assert resource_claim(kubeapi, "fresh", "fresh")["status"]["allocation"]


def test_another_tenant_attaching_the_same_cluster_leaves_this_tenants_workloads_alone(
    kubeapi, a10_pool, context, make_member
):
    from clusters.services import attach_cluster
    from nvke.tenancy.context import TenantContext

    cluster = a10_pool(consumable=True)
    fraction(context, cluster, "train", "8Gi", 70)
    kubeapi.create(gated_pod("train-pod", "train"))
    sync_workloads(cluster.pk)
    globex = make_member("globex", "owner").memberships.get()
    kubeapi.create(objects.namespace("research", {dra.MANAGED: "true"}))
    theirs = attach_cluster(
        context=TenantContext(globex.tenant, "owner"),
        name="shared",
        endpoint=kubeapi.url,
        token=nvke_token(kubeapi),
        ca_bundle=kubeapi.ca_bundle,
    )
    before = {
        "claim": resource_claim(kubeapi, "train")["status"],
        "record": kubeapi.get("nvke.io/v1alpha1", "GPUAllocation", "train", "ml")["spec"],
        "node": kubeapi.get("v1", "Node", "a10-0")["metadata"]["annotations"][records.SNAPSHOT],
        "pod": kubeapi.get("v1", "Pod", "train-pod", "ml")["metadata"]["annotations"],
    }

    sync_workloads(theirs.pk)  # globex's NVKE cluster: it has no claims, and ml is not its namespace

    assert resource_claim(kubeapi, "train")["status"] == before["claim"]
    assert kubeapi.get("nvke.io/v1alpha1", "GPUAllocation", "train", "ml")["spec"] == before["record"]
    assert kubeapi.get("v1", "Node", "a10-0")["metadata"]["annotations"][records.SNAPSHOT] == before["node"]
    assert kubeapi.get("v1", "Pod", "train-pod", "ml")["metadata"]["annotations"] == before["pod"]
    assert kubeapi.get("v1", "Namespace", "research")["metadata"]["labels"][dra.TENANT] == "globex"
    sync_workloads(cluster.pk)  # and acme's pass leaves globex's namespace to it
    assert kubeapi.get("v1", "Namespace", "research")["metadata"]["labels"][dra.TENANT] == "globex"
    assert resource_claim(kubeapi, "train")["status"] == before["claim"]


def test_without_the_right_to_label_namespaces_nvke_leaves_an_unowned_one_alone_and_says_how_to_fix_it(
    kubeapi, a10_pool, context
):
    cluster = a10_pool(consumable=True)  # ml is labelled managed, with no tenant yet
    kubeapi.faults.fail("PATCH", r"/api/v1/namespaces/ml$", 403, times=5, reason="Forbidden")
    fraction(context, cluster, "train", "8Gi", 70)

    sync_workloads(cluster.pk)

    assert resource_claim(kubeapi, "train") is None
    waiting = Claim.objects.get(name="train").workload
    assert waiting["state"] == "waiting" and f"label it {dra.TENANT}=acme" in waiting["message"]
    kubeapi.faults.clear()
    sync_workloads(cluster.pk)
    assert resource_claim(kubeapi, "train")["status"]["allocation"]


def test_a_stale_resource_version_reads_the_claim_again_and_decides_again(kubeapi, a10_pool, context):
    cluster = a10_pool(consumable=True)
    fraction(context, cluster, "train", "8Gi", 70)
    kubeapi.faults.conflict(r"/namespaces/ml/resourceclaims/train/status$")
    kubeapi.clear_requests()

    sync_workloads(cluster.pk)

    status_writes = [r for r in kubeapi.requests if r[0] == "PATCH" and r[1].endswith("/train/status")]
    assert len(status_writes) == 2  # the first lost to the conflict, the second was decided again
    assert (
        resource_claim(kubeapi, "train")["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    )


def test_what_each_claim_holds_is_readable_with_kubectl(kubeapi, kube_client, a10_pool, context):
    cluster = a10_pool(consumable=True)
    train = fraction(context, cluster, "train", "8Gi", 70)
    fraction(context, cluster, "infer", "2Gi", 20)
    sync_workloads(cluster.pk)

    # kubectl get gpuallocations -o wide: the table the API server prints from the CRD's columns
    custom = client.CustomObjectsApi(kube_client)
    listed = custom.list_namespaced_custom_object("nvke.io", "v1alpha1", "ml", "gpuallocations")["items"]
    specs = {o["metadata"]["name"]: o["spec"] for o in listed}
    assert {name: (s["node"], s["devices"], s["gpuMemory"], s["gpuUtil"]) for name, s in specs.items()} == {
        "train": ("a10-0", "gpu-0", "8Gi", "10%/70%"),
        "infer": ("a10-0", "gpu-0", "2Gi", "10%/20%"),
    }
    columns = [c["name"] for c in records.crd()["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert {"GPU-MEMORY", "GPU-UTIL"} <= set(columns)
    # kubectl describe node: per GPU what is held and by whom
    (gpu,) = json.loads(kubeapi.get("v1", "Node", "a10-0")["metadata"]["annotations"][records.SNAPSHOT])
    assert (gpu["gpu"], gpu["memoryMiB"], gpu["guaranteed"], gpu["ceilings"]) == (0, 10240, "20%", "90%")
    assert sorted(gpu["claims"]) == ["ml/infer", "ml/train"]

    resize_claim(train.pk, compute_percent=50)
    sync_workloads(cluster.pk)
    assert (
        custom.get_namespaced_custom_object("nvke.io", "v1alpha1", "ml", "gpuallocations", "train")["spec"][
            "gpuUtil"
        ]
        == "10%/50%"
    )
    assert ("Resized", "Resized from 8Gi at 10%/70% compute to 8Gi at 10%/50%.") in events(kubeapi, "train")

    release_claim(Claim.objects.get(name="infer"))
    release_claim(Claim.objects.get(name="train"))
    sync_workloads(cluster.pk)
    assert custom.list_namespaced_custom_object("nvke.io", "v1alpha1", "ml", "gpuallocations")["items"] == []
    assert records.SNAPSHOT not in (kubeapi.get("v1", "Node", "a10-0")["metadata"].get("annotations") or {})


def test_a_resized_claim_reaches_the_pods_already_released(kubeapi, a10_pool, context):
    cluster = a10_pool(consumable=True)
    train = fraction(context, cluster, "train", "8Gi", 70)
    kubeapi.create(gated_pod("train-pod", "train"))
    sync_workloads(cluster.pk)
    assert "schedulingGates" not in kubeapi.get("v1", "Pod", "train-pod", "ml")["spec"]

    resize_claim(train.pk, compute_percent=50)
    sync_workloads(cluster.pk)
    sync_workloads(cluster.pk)  # said once

    held = kubeapi.get("v1", "Pod", "train-pod", "ml")["metadata"]["annotations"]
    assert held["nvke.io/gpu-utilization"] == "50"
    assert [m for r, m in events(kubeapi, "train-pod") if r == "Resized"] == [
        "NVKE resized its GPU claim: 8Gi of GPU memory, compute 10% guaranteed up to 50%."
    ]


def test_a_failed_gpu_moves_only_its_claim_and_evicts_only_the_pod_on_it(
    gpu_cluster, attach, make_attached_pool, context
):
    for node in ("gpu-a", "gpu-b", "gpu-c"):
        gpu_cluster.create(objects.resource_slice(node, 8))
    gpu_cluster.create(objects.namespace("ml", {dra.MANAGED: "true"}))
    cluster = attach(gpu_cluster)
    make_attached_pool(cluster, 1)
    for name in ("a", "b"):
        create_claim(context=context, cluster=cluster, name=name, namespace="ml", kind="whole")
    devices = {}
    for name in ("a", "b"):
        gpu_cluster.create(gated_pod(f"{name}-pod", name))
    sync_workloads(cluster.pk)  # allocated, reserved, released: kube-scheduler binds them
    for name in ("a", "b"):
        (result,) = resource_claim(gpu_cluster, name)["status"]["allocation"]["devices"]["results"]
        devices[name] = (result["pool"], result["device"])
        assert gpu_cluster.get("v1", "Pod", f"{name}-pod", "ml")["spec"]["nodeName"] == result["pool"]
    sync_workloads(cluster.pk)  # the node snapshots say which pods hold each GPU
    for name, (node, device) in devices.items():
        held = json.loads(gpu_cluster.get("v1", "Node", node)["metadata"]["annotations"][records.SNAPSHOT])
        (gpu,) = [g for g in held if f"gpu-{g['gpu']}" == device]
        assert (gpu["claims"], gpu["pods"]) == ([f"ml/{name}"], [f"ml/{name}-pod"])
    node, device = devices["a"]
    failed = Gpu.objects.get(node__name=node, index=int(device.split("-")[1]))
    gpu_cluster.clear_requests()

    evict_claims(cluster.pk, fail_gpu(failed))  # a fatal XID on a's GPU
    sync_workloads(cluster.pk)

    evictions = [r[1] for r in gpu_cluster.requests if r[0] == "POST" and r[1].endswith("/eviction")]
    assert evictions == ["/api/v1/namespaces/ml/pods/a-pod/eviction"]
    assert ungranted(gpu_cluster.requests) == set()
    assert gpu_cluster.get("v1", "Pod", "b-pod", "ml") is not None
    ((reason, message),) = [(r, m) for r, m in events(gpu_cluster, "a-pod") if r == "Moved"]
    assert message.startswith(f"NVKE moved its GPU claim from {device} on node {node} to GPU-")
    sync_workloads(cluster.pk)  # a's pod is gone, its reservation dropped: a is allocated where it now is
    (moved,) = resource_claim(gpu_cluster, "a")["status"]["allocation"]["devices"]["results"]
    assert (moved["pool"], moved["device"]) != devices["a"]
    b_results = resource_claim(gpu_cluster, "b")["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in b_results] == [devices["b"]]


def test_the_claim_page_says_where_its_workload_stands(kubeapi, a10_pool, context, owner):
    from django.test import Client

    cluster = a10_pool(consumable=False)
    fraction(context, cluster, "train", "8Gi", 70)
    waiting = fraction(context, cluster, "infer", "2Gi", 20)
    sync_workloads(cluster.pk)

    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/claims/{waiting.pk}/").content.decode()
    assert "On the cluster" in page and "NVKE&#x27;s API (ResourceClaim <code>ml/infer</code>)" in page
    assert "Waiting: NVKE shares its GPU with ml/train" in page
    assert "kubectl -n ml get gpuallocation infer -o wide" in page


def test_a_mig_claim_is_allocated_the_published_mig_device_at_its_placement(
    gpu_cluster, attach, sharing_pool, context
):
    piece = objects.resource_slice("gpu-a", 8)
    for gpu in range(8):
        for start in range(7):  # the driver's 1g.10gb devices at every placement of every GPU
            piece["spec"]["devices"].append(
                {
                    "name": f"gpu-{gpu}-mig-1g10gb-19-{start}",
                    "attributes": {
                        "type": {"string": "mig"},
                        "profile": {"string": "1g.10gb"},
                        "parentUUID": {"string": objects.gpu_uuid("gpu-a", gpu)},
                    },
                    "capacity": {"memory": {"value": "10Gi"}},
                }
            )
    gpu_cluster.create(piece)
    gpu_cluster.create(objects.namespace("ml", {dra.MANAGED: "true"}))
    cluster = attach(gpu_cluster)
    sharing_pool(
        cluster, "mig", "h100-sxm5-80gb", 8, name="mig", node_selector={"kubernetes.io/hostname": "gpu-a"}
    )
    claim = create_claim(
        context=context, cluster=cluster, name="slice", namespace="ml", kind="mig", mig_profile="1g.10gb"
    )
    share = claim.allocation.shares.get()

    sync_workloads(cluster.pk)

    rc = resource_claim(gpu_cluster, "slice")
    assert rc["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "mig.nvidia.com"
    (result,) = rc["status"]["allocation"]["devices"]["results"]
    assert result["device"] == f"gpu-{share.gpu.index}-mig-1g10gb-19-{share.mig_start}"
    assert result["pool"] == "gpu-a"


def test_a_claim_generated_from_a_pods_template_is_adopted_and_goes_when_the_pod_finishes(kubeapi, a10_pool):
    cluster = a10_pool(consumable=True)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    request["exactly"]["capacity"] = {"requests": {"memory": "4Gi"}}
    kubeapi.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "notebook-gpu", "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        }
    )
    pod = gated_pod("notebook", "unused")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "notebook-gpu"}]
    kubeapi.create(pod)
    (entry,) = pod_of(kubeapi, "notebook")["status"]["resourceClaimStatuses"]  # the claim controller's
    generated = entry["resourceClaimName"]

    sync_workloads(cluster.pk)
    sync_workloads(cluster.pk)

    claim = Claim.objects.get(name=generated)
    assert (claim.source, claim.gpu_memory_mib, claim.status) == ("resourceclaim", 4096, "allocated")
    running = pod_of(kubeapi, "notebook")
    assert (running["spec"]["nodeName"], running["status"]["phase"]) == ("a10-0", "Running")

    kubeapi.update({**running, "status": {**running["status"], "phase": "Succeeded"}})
    assert resource_claim(kubeapi, generated)["metadata"]["deletionTimestamp"]  # NVKE's finalizer holds it
    sync_workloads(cluster.pk)
    assert resource_claim(kubeapi, generated) is None
    assert not Claim.objects.filter(name=generated).exists()
