"""On an attached cluster, a preempted claim's pods go the way a drain's do: evicted through the Eviction
API by the workloads pass, with the reason on the pod; the preemptor's ResourceClaim is allocated once
they are gone. Against the stand-in API server."""

from claims.allocator.service import create_claim
from claims.models import Claim
from claims.workloads import sync_workloads
from nvke.providers.kubernetes import dra, gangs, scheduler
from nvke.tenancy.context import TenantContext
from tests.kubeapi import objects
from tests.nvke.providers.kubernetes.test_workloads import events, gated_pod, pytestmark, resource_claim

__all__ = ["pytestmark"]


def test_a_preempted_claims_pods_are_evicted_as_a_drains_are(gpu_cluster, attach, make_attached_pool, owner):
    gpu_cluster.create(objects.resource_slice("gpu-a", 8))
    gpu_cluster.create(objects.namespace("ml", {dra.MANAGED: "true"}))
    cluster = attach(gpu_cluster)
    make_attached_pool(cluster, 1)
    context = TenantContext(owner.memberships.get().tenant, "owner")
    create_claim(context=context, cluster=cluster, name="train", namespace="ml", kind="whole", gpus=8)
    gpu_cluster.create(gated_pod("train-pod", "train"))
    sync_workloads(cluster.pk)  # allocated, reserved, released: kube-scheduler binds it
    assert gpu_cluster.get("v1", "Pod", "train-pod", "ml")["spec"]["nodeName"] == "gpu-a"
    gpu_cluster.clear_requests()

    infer = create_claim(
        context=context, cluster=cluster, name="infer", namespace="ml", kind="whole", gpus=8, priority=10
    )
    assert infer.status == "allocated"
    assert Claim.objects.get(name="train").status == "pending"
    sync_workloads(cluster.pk)

    evictions = [r[1] for r in gpu_cluster.requests if r[0] == "POST" and r[1].endswith("/eviction")]
    assert evictions == ["/api/v1/namespaces/ml/pods/train-pod/eviction"]
    ((message,),) = [(m,) for r, m in events(gpu_cluster, "train-pod") if r == "TakenBack"]
    assert "Preempted by claim ml/infer (priority 10)" in message
    sync_workloads(cluster.pk)  # the pod is gone: train's allocation is withdrawn
    assert (resource_claim(gpu_cluster, "train").get("status") or {}).get("allocation") is None
    assert Claim.objects.get(name="infer").workload["state"] == "waiting"  # train's devices still written
    sync_workloads(cluster.pk)  # its GPUs free on the cluster too: infer's allocation is written
    results = resource_claim(gpu_cluster, "infer")["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results} == {"gpu-a"} and len(results) == 8


def test_a_pod_told_it_will_be_preempted_names_its_preemptor(
    gpu_cluster, attach, make_attached_pool, owner, settings
):
    """With a grace period the victim keeps its GPUs a while: its running pod is annotated with who will
    take them (nvke.io/preempted-by), and no Resized event is said for it."""
    settings.NVKE_PREEMPTION_GRACE_S = 60
    gpu_cluster.create(objects.namespace("ml", {dra.MANAGED: "true"}))
    cluster = attach(gpu_cluster)
    make_attached_pool(cluster, 1)
    pod = objects.pod("train", namespace="ml", gpus=8)
    pod["spec"]["schedulerName"] = scheduler.SCHEDULER
    gpu_cluster.create(pod)
    sync_workloads(cluster.pk)
    assert gpu_cluster.get("v1", "Pod", "train", "ml")["spec"]["nodeName"] == "gpu-a"

    context = TenantContext(owner.memberships.get().tenant, "owner")
    create_claim(
        context=context, cluster=cluster, name="infer", namespace="ml", kind="whole", gpus=8, priority=10
    )
    assert Claim.objects.get(name="train").status == "allocated"  # its grace period runs
    sync_workloads(cluster.pk)

    annotations = gpu_cluster.get("v1", "Pod", "train", "ml")["metadata"]["annotations"]
    assert annotations[gangs.PREEMPTED_ANNOTATION] == "ml/infer"
    assert "Resized" not in [reason for reason, _ in events(gpu_cluster, "train")]
