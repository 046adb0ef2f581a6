"""Gangs on Kubernetes: pods that belong together (scheduler-plugins' PodGroup and its label, NVKE's label
pair where no PodGroup CRD is installed, Kubernetes' own Workload API PodGroup at 1.36 with
GenericWorkload on) are adopted as one claim group; NVKE keeps every member's scheduling gate (DRA) or
binding (scheduler path) until the group's minimum is placed, then releases them in one pass; a group
below its minimum or that cannot fit keeps every member waiting with an event naming the group and what
it lacks. On the strict stand-in at 1.34 and 1.36, both paths, with kube-scheduler and the kubelet."""

import pytest

from claims.models import Claim, ClaimGroup
from claims.workloads import sync_workloads
from nvke.providers.kubernetes import dra, gangs, records, scheduler
from tests.kubeapi import objects
from tests.kubeapi.server import FakeKubeApi

from .access import ungranted
from .test_workloads import events, gated_pod, pod_of

pytestmark = pytest.mark.django_db
NODES = ("gpu-a", "gpu-b", "gpu-c")  # 8 H100s each


@pytest.fixture(params=["1.34.2", "1.36.0"])
def kubeapi(request):
    with FakeKubeApi(request.param) as server:
        objects.gpu_operator(server)
        server.create(records.crd())
        server.create(objects.device_class())
        server.create(objects.cpu_node("cpu-0"))
        for name in NODES:
            server.create(objects.gpu_node(name, count=8))
            server.create(objects.resource_slice(name, 8))
        server.create(objects.namespace("ml", {dra.MANAGED: "true"}))
        server.settle()
        yield server


@pytest.fixture
def cluster(kubeapi, attach, make_attached_pool):
    attached = attach(kubeapi)
    make_attached_pool(attached, len(NODES))
    return attached


def eight_gpu_claim(name: str) -> dict:
    """A user's ResourceClaim for 8 whole GPUs, which NVKE adopts."""
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [request]}},
    }


def dra_member(kubeapi, name: str, labels: dict[str, str], **spec) -> None:
    """A gang member on the DRA path: its claim, and its pod as NVKE's admission lets it in (gated)."""
    kubeapi.create(eight_gpu_claim(f"{name}-gpu"))
    pod = gated_pod(name, f"{name}-gpu")
    pod["metadata"]["labels"] = labels
    pod["spec"].update(spec)
    kubeapi.create(pod)


def scheduled_member(kubeapi, name: str, labels: dict[str, str]) -> None:
    """A gang member on the scheduler path: 8 whole GPUs asked of NVKE's scheduler."""
    pod = objects.pod(name, namespace="ml", labels=labels, gpus=8)
    pod["spec"]["schedulerName"] = scheduler.SCHEDULER
    kubeapi.create(pod)


def gated(kubeapi, name: str) -> bool:
    return {"name": dra.GATE} in (pod_of(kubeapi, name)["spec"].get("schedulingGates") or [])


def last_wait(kubeapi, name: str) -> str:
    """What NVKE said last on the pod (it keeps that in an annotation, and says it as an Event)."""
    said = pod_of(kubeapi, name)["metadata"]["annotations"]["nvke.io/reason"]
    assert ("FailedScheduling", said.partition(": ")[2]) in events(kubeapi, name)
    return said


def test_a_podgroup_on_dra_is_held_below_its_minimum_then_released_together(kubeapi, cluster):
    kubeapi.create(objects.coscheduling_crd())
    kubeapi.create(objects.coscheduling_pod_group("train", "ml", 2))
    label = {gangs.POD_GROUP_LABEL: "train"}
    dra_member(kubeapi, "train-0", label)
    kubeapi.clear_requests()

    sync_workloads(cluster.pk)

    assert ungranted(kubeapi.requests) == set()  # NVKE's access manifest lets it read PodGroups
    assert not Claim.objects.exists() and gated(kubeapi, "train-0")  # one pod of two: nothing is held
    assert "Pod group ml/train has 0 of its minimum 2 pods placed (1 found)" in last_wait(kubeapi, "train-0")

    dra_member(kubeapi, "train-1", label)
    sync_workloads(cluster.pk)

    group = ClaimGroup.objects.get(name="train", namespace="ml")
    assert (group.members, group.min_members) == (2, 2)
    members = Claim.objects.filter(group=group)
    assert sorted(members.values_list("name", "status")) == [
        ("train-0-gpu", "allocated"),
        ("train-1-gpu", "allocated"),
    ]
    kubeapi.settle()
    for name in ("train-0", "train-1"):  # released in the same pass; kube-scheduler and the kubelet run them
        pod = pod_of(kubeapi, name)
        assert not gated(kubeapi, name) and pod["status"]["phase"] == "Running"
        assert pod["metadata"]["annotations"][gangs.GROUP_ANNOTATION] == "ml/train"
    # the tightest domain: each member has a node of its own, and the two share none
    assert len({pod_of(kubeapi, n)["spec"]["nodeName"] for n in ("train-0", "train-1")}) == 2


def test_a_gang_that_cannot_fit_keeps_every_member_gated_naming_what_it_lacks(kubeapi, cluster):
    # no PodGroup CRD here: NVKE's label pair says the group and its minimum
    labels = {gangs.POD_GROUP_LABEL: "big", gangs.MIN_MEMBER_LABEL: "4"}
    for i in range(4):  # 4 x 8 GPUs on 3 nodes of 8
        dra_member(kubeapi, f"big-{i}", labels)

    sync_workloads(cluster.pk)
    sync_workloads(cluster.pk)

    group = ClaimGroup.objects.get(name="big")
    assert set(Claim.objects.filter(group=group).values_list("status", flat=True)) == {"pending"}
    for i in range(4):
        assert gated(kubeapi, f"big-{i}")
        message = last_wait(kubeapi, f"big-{i}")
        assert "Pod group ml/big has 0 of its minimum 4 pods placed" in message
        assert "Group ml/big holds nothing" in message and "it lacks room for 1" in message
    for rc in kubeapi.list("resource.k8s.io/v1", "ResourceClaim", "ml"):
        assert not (rc.get("status") or {}).get("allocation")  # nothing held on the cluster either


def test_a_gang_without_a_minimum_is_told_what_to_add(kubeapi, cluster):
    dra_member(kubeapi, "lone-0", {gangs.POD_GROUP_LABEL: "lone"})

    sync_workloads(cluster.pk)

    assert not Claim.objects.exists() and gated(kubeapi, "lone-0")
    assert f"no {gangs.MIN_MEMBER_LABEL} label" in last_wait(kubeapi, "lone-0")


def test_the_workload_apis_podgroup_makes_a_gang_where_it_is_served(kubeapi, cluster):
    if kubeapi.store.registry.minor < 36:
        pytest.skip("scheduling.k8s.io/v1alpha2 is served from 1.36 (1.35's v1alpha1 was replaced)")
    kubeapi.features.set("GenericWorkload", True)
    kubeapi.create(objects.workload_pod_group("job", "ml", 2))
    group = {"schedulingGroup": {"podGroupName": "job"}}
    dra_member(kubeapi, "job-0", {}, **group)
    sync_workloads(cluster.pk)
    assert not Claim.objects.exists() and "minimum 2" in last_wait(kubeapi, "job-0")

    dra_member(kubeapi, "job-1", {}, **group)
    sync_workloads(cluster.pk)

    assert ClaimGroup.objects.get(name="job").min_members == 2
    assert not gated(kubeapi, "job-0") and not gated(kubeapi, "job-1")


def test_a_gang_on_the_scheduler_path_is_bound_only_once_its_minimum_is_placed(kubeapi, cluster):
    labels = {gangs.POD_GROUP_LABEL: "sched", gangs.MIN_MEMBER_LABEL: "2"}
    scheduled_member(kubeapi, "sched-0", labels)

    sync_workloads(cluster.pk)

    assert not pod_of(kubeapi, "sched-0")["spec"].get("nodeName")
    assert "Pod group ml/sched has 0 of its minimum 2 pods placed" in last_wait(kubeapi, "sched-0")

    scheduled_member(kubeapi, "sched-1", labels)
    kubeapi.clear_requests()
    sync_workloads(cluster.pk)
    sync_workloads(cluster.pk)  # the pass after adoption binds what the allocator placed

    assert ungranted(kubeapi.requests) == set()
    assert ClaimGroup.objects.get(name="sched").members == 2
    for name in ("sched-0", "sched-1"):
        pod = pod_of(kubeapi, name)
        assert pod["spec"]["nodeName"] in NODES
        assert pod["metadata"]["annotations"][gangs.GROUP_ANNOTATION] == "ml/sched"

    # a third pod of the gang joins the placed group and is bound where it fits
    scheduled_member(kubeapi, "sched-2", labels)
    sync_workloads(cluster.pk)
    sync_workloads(cluster.pk)
    assert ClaimGroup.objects.get(name="sched").members == 3
    assert pod_of(kubeapi, "sched-2")["spec"]["nodeName"] in NODES

    for i in range(3):  # the job is done: its pods go, and so do their claims and the group
        kubeapi.delete("v1", "Pod", f"sched-{i}", "ml")
    sync_workloads(cluster.pk)
    assert not Claim.objects.exists() and not ClaimGroup.objects.exists()


def test_pods_of_one_gang_asking_for_different_gpus_are_refused_together(kubeapi, cluster):
    labels = {gangs.POD_GROUP_LABEL: "mixed", gangs.MIN_MEMBER_LABEL: "2"}
    scheduled_member(kubeapi, "mixed-0", labels)
    odd = objects.pod("mixed-1", namespace="ml", labels=labels, gpus=4)
    odd["spec"]["schedulerName"] = scheduler.SCHEDULER
    kubeapi.create(odd)

    sync_workloads(cluster.pk)

    assert not Claim.objects.exists() and not ClaimGroup.objects.exists()
    for name in ("mixed-0", "mixed-1"):
        assert "The pods of group ml/mixed ask for different GPUs" in last_wait(kubeapi, name)
