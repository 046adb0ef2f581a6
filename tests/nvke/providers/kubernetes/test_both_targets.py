"""Scenarios that run on the fake API server always and on a real cluster when NVKE_K8S_TEST_KUBECONFIG
names one (see docs/operations.md): the provider is the same, so a difference means the fake is wrong.
The real cluster needs the GPU Operator, GPU feature discovery and a GPU node the tests may cordon and
drain (NVKE_K8S_TEST_NODE); they leave it uncordoned and delete what they create."""

import json

import pytest

from nvke.providers.base import ClusterRef, DeviceShare, ProviderError, WorkloadClaim
from nvke.providers.kubernetes import admission, attach, dra, gpus, records, scheduler
from tests.kubeapi import objects

from .access import nvke_token
from .targets import (
    PAUSE_IMAGE,
    ThroughKubeconfig,
    claim_pod,
    eventually,
    manage,
    ops_for,
    published,
    real_target,
    whole_gpu,
)


@pytest.fixture(
    params=["fake", "fake-through-kubeconfig", pytest.param("real", marks=pytest.mark.kubernetes)]
)
def target(request, tmp_path):
    """(server, GPU node name) on the fake GPU cluster — seeded directly, or through the real-cluster
    adapter and a kubeconfig as its admin, which checks the adapter itself — or on the real cluster when
    one is named."""
    if request.param == "fake":
        return request.getfixturevalue("gpu_cluster"), "gpu-a"
    if request.param == "fake-through-kubeconfig":
        fake = request.getfixturevalue("gpu_cluster")
        nvke_token(fake)  # NVKE's manifest, whose token Secret the adapter reads
        fake.token_user = "kubernetes-admin"  # the kubeconfig's token is the admin's, not NVKE's
        return ThroughKubeconfig(fake, tmp_path), "gpu-a"
    return real_target()


def test_the_cluster_passes_attach(target):
    server, node = target
    facts = attach.inspect(
        ClusterRef(name="t", endpoint=server.url, token=nvke_token(server), ca_bundle=server.ca_bundle)
    )
    assert facts.gpu_nodes >= 1 and facts.version.startswith("v1.")
    assert node in {n.name for n in ops_for(server).list_nodes()}


def test_cordon_round_trip(target):
    server, node = target
    ops = ops_for(server)
    was = bool(server.get("v1", "Node", node)["spec"].get("unschedulable"))
    try:
        ops.cordon(node)
        assert server.get("v1", "Node", node)["spec"]["unschedulable"] is True
        assert next(n for n in ops.list_nodes() if n.name == node).unschedulable
    finally:
        (ops.cordon if was else ops.uncordon)(node)
    assert bool(server.get("v1", "Node", node)["spec"].get("unschedulable")) is was


def test_a_budget_holds_a_drain_until_it_goes(target, scratch):
    server, node = target
    ops = ops_for(server)
    # Placed on the node by name: no scheduler, and the kubelet minds only NoExecute taints.
    pod = objects.pod("held", namespace=scratch, node=node, labels={"app": "held"}, image=PAUSE_IMAGE)
    server.create(pod)
    server.create(objects.pdb("held-budget", namespace=scratch, selector={"app": "held"}, min_available=1))
    eventually(
        server,
        lambda: (
            (server.get("v1", "Pod", "held", namespace=scratch) or {}).get("status", {}).get("phase")
            == "Running"
        ),
    )
    eventually(
        server,
        lambda: (
            (server.get("policy/v1", "PodDisruptionBudget", "held-budget", namespace=scratch) or {})
            .get("status", {})
            .get("currentHealthy")
            == 1
        ),
    )
    try:
        with pytest.raises(ProviderError) as refused:
            ops.drain(node)
        assert refused.value.reason == "DisruptionBudget" and f"{scratch}/held" in refused.value.message
        status = ops.drain_status(node)
        assert status.blocked and f"{scratch}/held-budget" in status.message
        server.delete("policy/v1", "PodDisruptionBudget", "held-budget", namespace=scratch)

        def drained():
            try:
                ops.drain(node)
            except ProviderError:
                return False
            return server.get("v1", "Pod", "held", namespace=scratch) is None

        eventually(server, drained)
    finally:
        ops.uncordon(node)


def test_an_allocation_nvke_writes_is_accepted_and_its_gated_pod_scheduled(target, scratch):
    """NVKE allocates a claim itself, reserves it for the pod and lifts its gate; kube-scheduler then binds
    the pod to the allocated node (on a real cluster it never starts without NVIDIA's kubelet plugin:
    binding is the check). The pod is made as NVKE's admission lets it in: gated, tolerating the pools."""
    server, node = target
    manage(server, scratch)
    claim = whole_gpu(scratch, "train", node)
    server.create(claim_pod("train", scratch, "train", **dra.admitted_pod_fields()))
    with published(server, node, scratch):
        ops = ops_for(server)
        (state,) = ops.sync_workloads([claim], tenant=scratch).states
        assert state.state == "allocated", state.message
        rc = server.get("resource.k8s.io/v1", "ResourceClaim", "train", scratch)
        assert rc["status"]["allocation"]["devices"]["results"] == [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": "gpu-0"}
        ]
        # reserved for the pod: the kubelet starts no pod a claim is not reserved for
        assert [r["name"] for r in rc["status"]["reservedFor"]] == ["train"]
        assert not server.get("v1", "Pod", "train", scratch)["spec"].get("schedulingGates")
        eventually(server, lambda: server.get("v1", "Pod", "train", scratch)["spec"].get("nodeName") == node)
        # NVKE's own finalizer only: kube-scheduler binds to an allocated claim and adds none of its own
        # (resource.kubernetes.io/delete-protection is upstream's, for the claims it allocates)
        rc = server.get("resource.k8s.io/v1", "ResourceClaim", "train", scratch)
        assert rc["metadata"]["finalizers"] == [dra.FINALIZER] == ["nvke.io/allocation"]
        server.delete("v1", "Pod", "train", scratch)
        eventually(server, lambda: server.get("v1", "Pod", "train", scratch) is None)
        ops.sync_workloads([], tenant=scratch)  # released: the allocation withdrawn, the claim deleted
        assert server.get("resource.k8s.io/v1", "ResourceClaim", "train", scratch) is None


def test_four_pods_share_one_gpu_through_nvkes_scheduler(target, scratch):
    """The sharing scenario on the scheduler path: a training pod (8Gi, 70 %) and three inference pods
    (2Gi, 20 %) asking NVKE's scheduler are bound to the one GPU's node through pods/binding, annotated
    with it, and the node's snapshot says so. On a real cluster binding is the check: without a node
    component advertising nvidia.com/gpu-memory the kubelet refuses to start them."""
    server, node = target
    manage(server, scratch)
    meta = server.get("v1", "Node", node)["metadata"]
    was = {
        "labels": {gpus.POOL_LABEL: (meta.get("labels") or {}).get(gpus.POOL_LABEL)},
        "annotations": {records.SNAPSHOT: (meta.get("annotations") or {}).get(records.SNAPSHOT)},
    }
    server.patch_merge("v1", "Node", node, {"metadata": {"labels": {gpus.POOL_LABEL: "nvke-test"}}})
    gpu = objects.gpu_uuid(node, 0)
    asked = {"train": ("8Gi", 8192, 70), **{f"infer-{i}": ("2Gi", 2048, 20) for i in range(3)}}
    claims = []
    for name, (memory, mib, percent) in asked.items():
        pod = objects.pod(name, namespace=scratch, image=PAUSE_IMAGE)
        # as NVKE's admission lets it in at every minor: NVKE's scheduler, tolerating the pools' taint
        pod["spec"].update(schedulerName=scheduler.SCHEDULER, tolerations=[dict(dra.POOL_TOLERATION)])
        limits = {
            "nvidia.com/gpu-memory": memory,
            "nvidia.com/gpu-utilization": str(percent),
            admission.SLOT: "1",
        }
        pod["spec"]["containers"][0]["resources"] = {"limits": limits}
        server.create(pod)
        share = DeviceShare(index=0, uuid=gpu, memory_mib=mib, ceiling_percent=percent, guaranteed_percent=10)
        claims.append(
            WorkloadClaim(
                namespace=scratch,
                name=name,
                source="pod",
                kind="fraction",
                gpus=1,
                node=node,
                shares=(share,),
                sharing_mode="time-slicing",
                isolation="none",
            )
        )

    def all_placed() -> bool:
        # NVKE binds one of these pods per pass until the kubelet has admitted it: the device plugin's
        # Allocate could not tell them apart otherwise (nvke/agent/allocation.py `ahead`)
        states = ops_for(server).sync_workloads(claims, tenant=scratch).states
        return {s.state for s in states} == {"allocated"}

    try:
        eventually(server, all_placed)
        for name in asked:
            bound = server.get("v1", "Pod", name, scratch)
            assert bound["spec"]["nodeName"] == node
            assert bound["metadata"]["annotations"][scheduler.ANNOTATIONS["uuids"]] == gpu
        snapshot = server.get("v1", "Node", node)["metadata"]["annotations"][records.SNAPSHOT]
        (held,) = [g for g in json.loads(snapshot) if g["uuid"] == gpu]
        assert (held["memoryMiB"], held["ceilings"]) == (14336, "130%")
        assert sorted(held["claims"]) == sorted(held["pods"]) == sorted(f"{scratch}/{name}" for name in asked)
    finally:
        server.patch_merge("v1", "Node", node, {"metadata": was})
