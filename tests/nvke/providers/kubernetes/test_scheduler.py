"""NVKE as the scheduler of `schedulerName: nvke` pods on a cluster without DRA: pods asking
`nvidia.com/gpu-memory` and `nvidia.com/gpu-utilization` are placed by the allocator, annotated with what
they hold and bound through pods/binding; those that cannot be placed say why and are bound once
capacity frees; a claim taken back evicts its pod; pods in namespaces NVKE does not manage are left
alone. Against the fake API server, at 1.33 (no resource.k8s.io/v1), 1.34 and 1.36, with kube-scheduler
running: it leaves pods that name another scheduler alone. Pods are created as a user's service account
does, through NVKE's admission policies: before 1.36 the user writes what the ValidatingAdmissionPolicy
asks (the pool toleration, a device-plugin slot), and one without the toleration is refused; from 1.36
the MutatingAdmissionPolicy adds them."""

import copy
import json

import pytest
from kubernetes import client

from claims.allocator.service import evict_claims, resize_claim
from claims.models import Claim
from claims.workloads import sync_workloads
from nodepools.models import Gpu
from nodepools.nodes import fail_gpu, record_preflight
from nvke.providers.kubernetes import admission, dra, records, scheduler
from tests.kubeapi import accounts, objects
from tests.kubeapi.fixtures import client_configuration
from tests.kubeapi.server import FakeKubeApi

from .access import ungranted

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["1.33.5", "1.34.2", "1.36.0"])
def minor(request) -> str:
    return request.param


@pytest.fixture
def server(minor):
    with FakeKubeApi(version=minor) as api:
        objects.gpu_operator(api)
        api.create(records.crd())
        api.create(objects.gpu_node("a10-0", product="NVIDIA-A10", count=1, memory_mib=23028))
        api.create(objects.namespace("ml", {dra.MANAGED: "true"}))
        api.settle()
        yield api


@pytest.fixture
def cluster(server, attach, sharing_pool):
    def make(mode: str = "time-slicing", **pool):
        attached = attach(server)
        sharing_pool(attached, mode, **pool)
        return attached

    return make


@pytest.fixture
def submit(server):
    """submit(pod, complete=True): create the pod as a user's service account (allowed to create pods)
    does, through NVKE's admission policies, which attach installs. `complete`: with what the
    ValidatingAdmissionPolicy asks of a GPU-share pod where no MutatingAdmissionPolicy adds it (before
    1.36): the pool toleration and one slot of NVKE's device plugin."""
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    token = accounts.grant(server, rules, name="user", namespace="ml")
    mutating = server.store.registry.by_kind(admission.API_VERSION, "MutatingAdmissionPolicy")

    def run(pod, complete: bool = True):
        pod = copy.deepcopy(pod)
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits") or {}
        if complete and not mutating and set(admission.SHARED_RESOURCES) & set(limits):
            pod["spec"]["tolerations"] = [dict(admission.TOLERATION)]
            limits[admission.SLOT] = "1"
        client.CoreV1Api(api).create_namespaced_pod(pod["metadata"]["namespace"], pod)

    with client.ApiClient(client_configuration(server, token=token)) as api:  # one connection a test
        yield run


def gpu_pod(name, memory, percent, namespace="ml"):
    pod = objects.pod(name, namespace=namespace)
    pod["spec"].update(schedulerName=scheduler.SCHEDULER, tolerations=[dict(dra.POOL_TOLERATION)])
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu-memory": memory, "nvidia.com/gpu-utilization": str(percent)}
    }
    return pod


def pod(server, name, namespace="ml"):
    return server.get("v1", "Pod", name, namespace)


def reasons(server, name, namespace="ml"):
    return [
        (e["reason"], e["message"])
        for e in server.list("v1", "Event", namespace)
        if e["involvedObject"]["name"] == name
    ]


def test_four_pods_share_one_a10_and_the_node_says_so(server, cluster, submit):
    attached = cluster()
    submit(gpu_pod("train", "8Gi", 70))
    for i in range(3):
        submit(gpu_pod(f"infer-{i}", "2Gi", 20))
    server.clear_requests()

    sync_workloads(attached.pk)
    # Each pod asks a device-plugin slot: pods whose Allocate answers differ (train's, the infers') are
    # bound to one node one pass after another, the kubelet admitting between (the last test).
    assert sum(bool(pod(server, n)["spec"].get("nodeName")) for n in ("train", "infer-0")) == 1
    sync_workloads(attached.pk)

    assert ungranted(server.requests) == set()  # NVKE's access manifest lets it do all this

    uuid = f"GPU-{Gpu.objects.get(node__name='a10-0', index=0).uuid}"
    names = ["train", "infer-0", "infer-1", "infer-2"]
    for name in names:
        bound = pod(server, name)
        assert bound["spec"]["nodeName"] == "a10-0"
        annotations = bound["metadata"]["annotations"]
        assert annotations[scheduler.ANNOTATIONS["uuids"]] == uuid
        assert annotations[scheduler.ANNOTATIONS["memory"]] == ("8Gi" if name == "train" else "2Gi")
        assert annotations[scheduler.ANNOTATIONS["ceiling"]] == ("70" if name == "train" else "20")
        assert annotations[scheduler.ANNOTATIONS["isolation"]] == "none"
        assert ("Scheduled", f"Successfully assigned ml/{name} to a10-0 (GPU 0).") in reasons(server, name)
        claim = Claim.objects.get(name=name)
        assert (claim.source, claim.workload["state"]) == ("pod", "allocated")
    (gpu,) = json.loads(server.get("v1", "Node", "a10-0")["metadata"]["annotations"][records.SNAPSHOT])
    assert gpu["uuid"] == uuid and gpu["memoryMiB"] == 14336 and gpu["ceilings"] == "130%"
    assert sorted(gpu["claims"]) == sorted(gpu["pods"]) == sorted(f"ml/{n}" for n in names)
    held = server.list("nvke.io/v1alpha1", "GPUAllocation", "ml")
    assert {o["metadata"]["name"]: o["spec"]["pods"] for o in held} == {n: n for n in names}


def test_a_pod_that_does_not_fit_says_why_and_is_bound_once_capacity_frees(
    server, cluster, submit, django_capture_on_commit_callbacks
):
    attached = cluster()
    submit(gpu_pod("big", "20Gi", 50))
    submit(gpu_pod("late", "8Gi", 50))

    sync_workloads(attached.pk)

    waiting = Claim.objects.get(name="late")
    assert (
        waiting.status == "pending"
        and "spec" in pod(server, "late")
        and not pod(server, "late")["spec"].get("nodeName")
    )
    (failed,) = [m for r, m in reasons(server, "late") if r == "FailedScheduling"]
    assert failed == waiting.pending_reason and "memory" in failed

    server.delete("v1", "Pod", "big", "ml")  # it finished: its claim is released, the GPU frees
    with django_capture_on_commit_callbacks(execute=True):  # the allocator's pass a release queues
        sync_workloads(attached.pk)
    assert not Claim.objects.filter(name="big").exists()
    assert Claim.objects.get(name="late").status == "allocated"
    sync_workloads(attached.pk)
    assert pod(server, "late")["spec"]["nodeName"] == "a10-0"


def test_a_pods_priority_orders_it_as_any_claims_when_capacity_frees(
    server, cluster, submit, django_capture_on_commit_callbacks
):
    attached = cluster()
    big = gpu_pod("big", "20Gi", 50)
    big["metadata"]["annotations"] = {dra.PRIORITY: "10"}  # as high as urgent's: it cannot preempt big
    submit(big)
    submit(gpu_pod("low", "12Gi", 50))
    urgent = gpu_pod("urgent", "12Gi", 50)
    urgent["metadata"]["annotations"] = {dra.PRIORITY: "10"}
    submit(urgent)
    odd = gpu_pod("odd", "1Gi", 10)
    odd["metadata"]["annotations"] = {dra.PRIORITY: "high"}
    submit(odd)
    sync_workloads(attached.pk)
    assert Claim.objects.get(name="urgent").priority == 10
    assert (Claim.objects.get(name="low").status, Claim.objects.get(name="urgent").status) == (
        "pending",
        "pending",
    )
    ((reason, message),) = reasons(server, "odd")
    assert reason == "FailedScheduling" and "nvke.io/priority must be a whole number" in message

    server.delete("v1", "Pod", "big", "ml")
    with django_capture_on_commit_callbacks(execute=True):
        sync_workloads(attached.pk)

    assert Claim.objects.get(name="urgent").status == "allocated"  # the later, higher one first
    assert Claim.objects.get(name="low").status == "pending"


def test_a_claim_taken_back_evicts_its_pod(server, cluster, submit):
    attached = cluster()
    submit(gpu_pod("train", "8Gi", 70))
    sync_workloads(attached.pk)
    assert pod(server, "train")["spec"]["nodeName"] == "a10-0"

    server.clear_requests()
    claims = fail_gpu(Gpu.objects.get(node__name="a10-0"))  # a fatal XID, as telemetry records it
    evict_claims(attached.pk, claims)
    assert Claim.objects.get(name="train").status == "pending"
    sync_workloads(attached.pk)

    evictions = [r for r in server.requests if r[0] == "POST" and r[1].endswith("/pods/train/eviction")]
    assert (
        len(evictions) == 1 and pod(server, "train") is None
    )  # through the Eviction API: no budget holds it
    assert ungranted(server.requests) == set()
    pending = Claim.objects.get(name="train").pending_reason
    assert ("FailedScheduling", pending) not in reasons(server, "train")
    uuid = f"GPU-{Gpu.objects.get(node__name='a10-0').uuid}"
    assert (
        "TakenBack",
        f"NVKE took its GPU claim back from {uuid} on a10-0 ({pending}): the pod is evicted.",
    ) in reasons(server, "train")
    sync_workloads(attached.pk)
    assert not Claim.objects.filter(name="train").exists()


def test_a_fatal_xid_evicts_only_the_pod_on_that_gpu_and_says_where_its_claim_moved(server, cluster, submit):
    server.create(objects.gpu_node("a10x3", product="NVIDIA-A10", count=3, memory_mib=23028))
    server.settle()
    attached = cluster(gpus_per_node=3, name="trio", node_selector={"kubernetes.io/hostname": "a10x3"})
    whole = objects.pod("whole", namespace="ml")
    whole["spec"].update(schedulerName=scheduler.SCHEDULER, tolerations=[dict(dra.POOL_TOLERATION)])
    whole["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    submit(whole)
    submit(gpu_pod("serve", "8Gi", 70))
    sync_workloads(attached.pk)
    was = pod(server, "serve")["metadata"]["annotations"][scheduler.ANNOTATIONS["uuids"]]
    failed = Gpu.objects.get(uuid=was.removeprefix("GPU-"))
    assert pod(server, "serve")["spec"]["nodeName"] == "a10x3"
    server.clear_requests()

    evict_claims(attached.pk, fail_gpu(failed))  # a fatal XID on serve's GPU
    sync_workloads(attached.pk)

    evictions = [r[1] for r in server.requests if r[0] == "POST" and r[1].endswith("/eviction")]
    assert evictions == ["/api/v1/namespaces/ml/pods/serve/eviction"]
    assert pod(server, "whole")["spec"]["nodeName"] == "a10x3"
    now = Claim.objects.get(name="serve").allocation.shares.get().gpu
    assert now.node.name == "a10x3" and now.pk != failed.pk  # another GPU of the same node
    assert (
        "Moved",
        f"NVKE moved its GPU claim from {was} on a10x3 to GPU-{now.uuid} on node a10x3 (8Gi of GPU "
        "memory, compute 10% guaranteed up to 70%): the pod is evicted.",
    ) in reasons(server, "serve")


def test_a_resized_claim_reaches_its_running_pod(server, cluster, submit):
    attached = cluster()
    submit(gpu_pod("serve", "8Gi", 70))
    sync_workloads(attached.pk)

    resize_claim(Claim.objects.get(name="serve").pk, compute_percent=40)
    sync_workloads(attached.pk)
    sync_workloads(attached.pk)  # said once

    annotations = pod(server, "serve")["metadata"]["annotations"]
    assert annotations[scheduler.ANNOTATIONS["ceiling"]] == "40"
    resized = [m for r, m in reasons(server, "serve") if r == "Resized"]
    assert resized == ["NVKE resized its GPU claim: 8Gi of GPU memory, compute 10% guaranteed up to 40%."]


def test_mps_pods_carry_their_mps_limits_and_the_isolation_their_node_enforces(server, cluster, submit):
    attached = cluster("mps")
    submit(gpu_pod("serve", "6Gi", 40))

    sync_workloads(attached.pk)

    annotations = pod(server, "serve")["metadata"]["annotations"]
    assert annotations["nvke.io/env.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert annotations["nvke.io/env.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=6144M"
    assert annotations[scheduler.ANNOTATIONS["isolation"]] == "none"  # no device plugin reported: none
    node = Claim.objects.get(name="serve").allocation.node
    record_preflight(node.pk, {"device_plugin": True})  # the plugin, but no MPS daemon said up yet
    sync_workloads(attached.pk)
    assert pod(server, "serve")["metadata"]["annotations"][scheduler.ANNOTATIONS["isolation"]] == "none"
    record_preflight(node.pk, {"mps_daemon": True})
    sync_workloads(attached.pk)
    assert (
        pod(server, "serve")["metadata"]["annotations"][scheduler.ANNOTATIONS["isolation"]] == "memory-capped"
    )


def test_pods_outside_managed_namespaces_and_unreadable_requests_are_not_placed(server, cluster, submit):
    attached = cluster()
    server.create(objects.namespace("other"))
    submit(gpu_pod("elsewhere", "2Gi", 20, namespace="other"))
    both = gpu_pod("both", "2Gi", 20)
    both["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    submit(both)

    sync_workloads(attached.pk)

    assert not Claim.objects.exists()
    assert not pod(server, "elsewhere", "other")["spec"].get("nodeName")
    assert reasons(server, "elsewhere", "other") == []
    ((reason, message),) = reasons(server, "both")
    assert reason == "FailedScheduling" and "Ask for one of" in message


def test_a_managed_namespace_belongs_to_the_first_tenant_that_acts_in_it(server, cluster, submit, context):
    attached = cluster()
    server.create(objects.namespace("theirs", {dra.MANAGED: "true", dra.TENANT: "globex"}))
    submit(gpu_pod("mine", "2Gi", 20))
    submit(gpu_pod("other", "2Gi", 20, namespace="theirs"))

    sync_workloads(attached.pk)

    labels = server.get("v1", "Namespace", "ml")["metadata"]["labels"]
    assert labels[dra.TENANT] == context.tenant.slug == "acme"  # ml was no one's: now acme's
    assert [c.name for c in Claim.objects.all()] == ["mine"]
    assert pod(server, "mine")["spec"]["nodeName"] == "a10-0"
    assert not pod(server, "other", "theirs")["spec"].get("nodeName")
    assert reasons(server, "other", "theirs") == []  # another tenant's: left alone, not even told


def test_a_budget_holds_back_the_eviction_of_a_pod_whose_claim_was_taken_back(server, cluster, submit):
    attached = cluster()
    training = gpu_pod("train", "8Gi", 70)
    training["metadata"]["labels"] = {"app": "train"}
    submit(training)
    server.create(objects.pdb("train", selector={"app": "train"}, namespace="ml", min_available=1))
    sync_workloads(attached.pk)

    evict_claims(attached.pk, fail_gpu(Gpu.objects.get(node__name="a10-0")))
    sync_workloads(attached.pk)

    assert pod(server, "train")["spec"]["nodeName"] == "a10-0"  # still there: the budget refused
    assert [r for r, _ in reasons(server, "train")].count("EvictionBlocked") == 1
    assert Claim.objects.get(name="train").workload["state"] == "waiting"


def test_a_pod_over_its_tenants_quota_is_told_which_quota(server, cluster, submit, context):
    from nvke.tenancy.models import Quota

    attached = cluster()
    Quota.objects.update_or_create(tenant=context.tenant, defaults={"max_claim_gpu_memory_mib": 4096})
    submit(gpu_pod("big", "8Gi", 50))

    sync_workloads(attached.pk)

    assert not Claim.objects.exists() and not pod(server, "big")["spec"].get("nodeName")
    ((reason, message),) = reasons(server, "big")
    assert reason == "FailedScheduling" and "max_claim_gpu_memory_mib" in message


@pytest.mark.parametrize("minor", ["1.33.5"], indirect=False)
def test_a_claim_made_through_the_api_says_why_no_pod_can_use_it_without_dra(server, cluster, context):
    from claims.allocator.service import create_claim

    attached = cluster()
    create_claim(context=context, cluster=attached, name="api", namespace="ml", kind="whole")

    sync_workloads(attached.pk)

    state = Claim.objects.get(name="api").workload
    assert state["state"] == "waiting" and "schedulerName: nvke" in state["message"]


def test_pods_the_device_plugin_could_not_tell_apart_are_bound_one_at_a_time(server, cluster, submit):
    """The kubelet's Allocate names no pod (nvke/agent/allocation.py): two pods asking one
    nvke.io/gpu-share slot each, with different limits, are not bound to one node before the kubelet
    admitted the first; pods with the same answer would be."""
    attached = cluster("mps")
    for name, memory, percent in (("train", "8Gi", 70), ("serve", "2Gi", 20)):
        slotted = gpu_pod(name, memory, percent)
        slotted["spec"]["containers"][0]["resources"]["limits"]["nvke.io/gpu-share"] = "1"
        submit(slotted)

    sync_workloads(attached.pk)

    bound = [name for name in ("train", "serve") if pod(server, name)["spec"].get("nodeName")]
    assert len(bound) == 1
    (held,) = {"train", "serve"} - set(bound)
    assert Claim.objects.get(name=held).workload == {
        "state": "waiting",
        "message": f"Waiting for the kubelet on a10-0 to admit ml/{bound[0]} first.",
    }
    assert pod(server, bound[0])["status"].get("containerStatuses")  # the stand-in's kubelet admitted it
    sync_workloads(attached.pk)
    assert pod(server, held)["spec"]["nodeName"] == "a10-0"
    assert Claim.objects.get(name=held).workload["state"] == "allocated"


@pytest.mark.parametrize("minor", ["1.33.5", "1.34.2"], indirect=False)
def test_a_users_share_pod_without_the_pool_toleration_is_refused_where_nothing_adds_it(
    server, cluster, submit
):
    cluster()
    bare = gpu_pod("bare", "2Gi", 20)
    del bare["spec"]["tolerations"]
    bare["spec"]["containers"][0]["resources"]["limits"][admission.SLOT] = "1"

    with pytest.raises(client.ApiException) as refused:
        submit(bare, complete=False)

    assert refused.value.status == 422
    message = json.loads(refused.value.body)["message"]
    assert "NVKE's GPU nodes carry the taint nvke.io/pool:NoSchedule: add spec.tolerations [" in message
    assert pod(server, "bare") is None


@pytest.mark.parametrize("minor", ["1.36.0"], indirect=False)
def test_a_users_share_pod_gets_the_pool_toleration_and_a_slot_from_1_36(server, cluster, submit):
    attached = cluster()
    bare = gpu_pod("bare", "2Gi", 20)
    del bare["spec"]["tolerations"]
    submit(bare, complete=False)

    admitted = pod(server, "bare")
    assert admitted["spec"]["tolerations"] == [admission.TOLERATION]
    assert admitted["spec"]["containers"][0]["resources"]["limits"][admission.SLOT] == "1"
    sync_workloads(attached.pk)
    assert pod(server, "bare")["spec"]["nodeName"] == "a10-0"
