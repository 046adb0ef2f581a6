"""The strict scenarios on both targets: the stand-in at 1.34 and 1.36, reached as a real cluster is (the
admin's kubeconfig over HTTPS, NVKE with its own service account's token), and, opt-in, the real cluster
NVKE_K8S_TEST_KUBECONFIG names (skipped with the reason otherwise; docs/operations.md says how to set
one up). NVKE's admission holds a claim pod from creation (or refuses it saying what to add) and only
NVKE's service account lifts the gate; a shared-GPU pod is sent to NVKE's scheduler (or refused naming it)
and bound by it; NVKE allocates as that account at each minor, and attach refuses a
role older than NVKE's, naming the missing rule; kube-scheduler and NVKE on DRA: a pod that
does not tolerate the pool keeps its gate and NVKE its allocation, a pod that slipped past the gate is
left to kube-scheduler; kube_sync's watches share one HTTP/2 connection. A difference between the
targets means the stand-in is wrong."""

import pytest
import yaml
from kubernetes.dynamic.exceptions import DynamicApiError

from nvke.providers.base import ClusterRef, DeviceShare, WorkloadClaim
from nvke.providers.kubernetes import admission, attach, dra, rbac, scheduler, streams
from nvke.providers.kubernetes.watch import ClusterWatch
from tests.kubeapi import objects
from tests.kubeapi.server import FakeKubeApi

from .access import nvke_token
from .targets import (
    PAUSE_IMAGE,
    POOL,
    claim_pod,
    eventually,
    in_pool,
    manage,
    ops_for,
    published,
    real_target,
    stand_in,
    whole_gpu,
)

VERSIONS = {"1.34": "1.34.2", "1.36": "1.36.0"}
GATE = {"name": dra.GATE}


@pytest.fixture(params=[*VERSIONS, pytest.param("real", marks=pytest.mark.kubernetes)])
def target(request, tmp_path):
    """(server, GPU node name): the stand-in at that minor, or the real cluster when one is named."""
    if request.param == "real":
        return real_target()
    fake = FakeKubeApi(version=VERSIONS[request.param]).start()
    request.addfinalizer(fake.stop)
    return stand_in(fake, tmp_path), "gpu-a"


def refused_to_nvke(server) -> set[tuple[str, str, str]]:
    """What the stand-in refused NVKE's service account (a real cluster's refusal raises in the test)."""
    fake = getattr(server, "fake", None)
    return {(g, r, v) for _, g, r, v, allowed in (fake.decisions if fake else ()) if not allowed}


def rc_of(server, name: str, namespace: str) -> dict:
    return server.get("resource.k8s.io/v1", "ResourceClaim", name, namespace)


def events(server, name: str, namespace: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in server.list("v1", "Event", namespace)
        if e["involvedObject"]["name"] == name
    ]


def test_a_claim_pod_is_held_from_creation_or_refused_saying_what_to_add(target, scratch):
    server, _ = target
    manage(server, scratch)
    pod = claim_pod("train", scratch, "train")
    if server.minor >= admission.MUTATING_VERSION:  # NVKE's MutatingAdmissionPolicy is served
        spec = server.create(pod)["spec"]
        assert spec["schedulingGates"] == [GATE]
        # a real kube-apiserver adds its DefaultTolerationSeconds ones beside NVKE's
        assert admission.TOLERATION in spec["tolerations"]
    else:
        with pytest.raises(DynamicApiError) as refused:
            server.create(pod)
        assert refused.value.status == 422
        body = str(refused.value.body)
        assert "ValidatingAdmissionPolicy 'nvke-gpu-pods'" in body
        assert "add spec.schedulingGates [{name: nvke.io/placement}]" in body
        assert server.get("v1", "Pod", "train", scratch) is None


def test_only_nvkes_service_account_lifts_the_gate(target, scratch):
    server, _ = target
    manage(server, scratch)
    server.create(claim_pod("train", scratch, "train", **dra.admitted_pod_fields()))
    lift = {"spec": {"schedulingGates": None}}
    with pytest.raises(DynamicApiError) as refused:
        server.patch_merge("v1", "Pod", "train", lift, scratch)  # the admin is not NVKE
    assert refused.value.status == 422
    assert "only NVKE removes the scheduling gate nvke.io/placement" in str(refused.value.body)

    server.as_token(nvke_token(server)).patch_merge("v1", "Pod", "train", lift, scratch)

    assert not server.get("v1", "Pod", "train", scratch)["spec"].get("schedulingGates")


def test_nvke_allocates_reserves_and_releases_as_its_service_account(target, scratch):
    server, node = target
    manage(server, scratch)
    claim = whole_gpu(scratch, "train", node)
    uid = server.create(claim_pod("train", scratch, "train", **dra.admitted_pod_fields()))["metadata"]["uid"]
    with published(server, node, scratch):
        ops = ops_for(server)
        (state,) = ops.sync_workloads([claim], tenant=scratch).states
        assert state.state == "allocated", state.message
        rc = rc_of(server, "train", scratch)
        assert rc["status"]["reservedFor"] == [{"resource": "pods", "name": "train", "uid": uid}]
        assert rc["metadata"]["finalizers"] == [dra.FINALIZER]
        server.delete("v1", "Pod", "train", scratch)
        eventually(server, lambda: server.get("v1", "Pod", "train", scratch) is None)
        # the claim controller drops the pod and leaves NVKE's allocation (1.36: resourceclaims/binding)
        eventually(server, lambda: not rc_of(server, "train", scratch)["status"].get("reservedFor"))
        assert rc_of(server, "train", scratch)["status"]["allocation"] == rc["status"]["allocation"]
        ops.sync_workloads([], tenant=scratch)
        assert rc_of(server, "train", scratch) is None
    assert refused_to_nvke(server) == set()


def older_role(server, namespace: str) -> str:
    """A service account of the test's own bound to NVKE's ClusterRole as it was before 1.36's DRA rule
    (no patch on resourceclaims/binding); its token. Cluster-scoped objects are named after the
    namespace and deleted by the caller."""
    document = yaml.safe_load(rbac.manifest())
    (role,) = [
        d for d in document["items"] if d["kind"] == "ClusterRole" and d["metadata"]["name"] == rbac.ACCOUNT
    ]
    role["metadata"] = {"name": namespace}
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["resourceclaims/binding"]]
    account = {"kind": "ServiceAccount", "name": "nvke-older", "namespace": namespace}
    server.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "nvke-older", "namespace": namespace},
        }
    )
    server.create(role)
    server.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": namespace},
            "subjects": [account],
        }
    )
    server.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": "nvke-older-token",
                "namespace": namespace,
                "annotations": {"kubernetes.io/service-account.name": "nvke-older"},
            },
        }
    )
    return server.account_token(namespace, "nvke-older-token")


def test_a_role_older_than_nvkes_is_refused_naming_the_rule_and_what_to_apply(target, scratch):
    server, _ = target
    try:
        token = older_role(server, scratch)
        cluster = ClusterRef(name="t", endpoint=server.url, token=token, ca_bundle=server.ca_bundle)
        with pytest.raises(attach.AttachRefused) as refused:
            attach.inspect(cluster)
        message = str(refused.value)
        assert "patch resourceclaims/binding.resource.k8s.io" in message
        assert "/api/v1/clusters/rbac-manifest/" in message and "kubectl apply" in message
    finally:
        server.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", scratch)
        server.delete("rbac.authorization.k8s.io/v1", "ClusterRole", scratch)


def test_a_pod_that_does_not_tolerate_the_pool_keeps_its_gate_and_nvke_its_allocation(target, scratch):
    """Made gated but without the toleration before its namespace was managed (admission now adds or
    demands it): released, kube-scheduler would find no node and clear NVKE's allocation."""
    server, node = target
    server.create(claim_pod("train", scratch, "train", schedulingGates=[GATE]))
    manage(server, scratch)
    with in_pool(server, node), published(server, node, scratch):
        (state,) = ops_for(server).sync_workloads([whole_gpu(scratch, "train", node)], tenant=scratch).states
        assert state.state == "allocated", state.message
        server.settle()

        assert rc_of(server, "train", scratch)["status"]["allocation"]  # not cleared by kube-scheduler
        assert server.get("v1", "Pod", "train", scratch)["spec"]["schedulingGates"] == [GATE]
        (message,) = [m for r, m in events(server, "train", scratch) if r == "FailedScheduling"]
        assert f"{node} (nvke.io/pool={POOL}:NoSchedule)" in message and "nvke.io/pool:NoSchedule" in message


def test_a_pod_that_slipped_past_the_gate_is_allocated_by_kube_scheduler_and_nvke_leaves_it(target, scratch):
    """Made ungated before its namespace was managed, with the ResourceClaim NVKE made for its claim:
    kube-scheduler allocates it, with its own finalizer, reserves it and binds the pod; NVKE then calls it
    a conflict and writes nothing into it."""
    server, node = target
    claim = whole_gpu(scratch, "train", node)
    with published(server, node, scratch):
        server.create(claim_pod("train", scratch, "train", tolerations=[dict(dra.POOL_TOLERATION)]))
        server.create(dra.resource_claim(claim))
        manage(server, scratch)
        eventually(server, lambda: (rc_of(server, "train", scratch).get("status") or {}).get("reservedFor"))
        allocation = rc_of(server, "train", scratch)["status"]["allocation"]

        (state,) = ops_for(server).sync_workloads([claim], tenant=scratch).states

        rc = rc_of(server, "train", scratch)
        assert rc["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert [r["name"] for r in rc["status"]["reservedFor"]] == ["train"]
        assert state.state == "conflict" and "Allocated by another scheduler" in state.message
        assert rc["status"]["allocation"] == allocation  # nothing of NVKE's written into it
        eventually(server, lambda: server.get("v1", "Pod", "train", scratch)["spec"].get("nodeName") == node)


def test_a_shared_gpu_pod_is_sent_to_nvkes_scheduler_and_bound_by_it(target, scratch):
    """The scheduler path: a pod asking nvidia.com/gpu-memory and -utilization gets schedulerName nvke
    and the pool toleration from NVKE's admission (1.36), or is refused naming them (1.34); NVKE's
    scheduler binds it through pods/binding to its claim's node, ungated."""
    server, node = target
    manage(server, scratch)
    pod = objects.pod("infer", namespace=scratch, image=PAUSE_IMAGE)
    limits = {"nvidia.com/gpu-memory": "4Gi", "nvidia.com/gpu-utilization": "50"}
    pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    if server.minor >= admission.MUTATING_VERSION:
        spec = server.create(pod)["spec"]
    else:
        pod["spec"]["tolerations"] = [dict(dra.POOL_TOLERATION)]
        with pytest.raises(DynamicApiError) as refused:
            server.create(pod)
        assert refused.value.status == 422 and "set spec.schedulerName: nvke" in str(refused.value.body)
        pod["spec"]["schedulerName"] = scheduler.SCHEDULER
        with pytest.raises(DynamicApiError) as refused:
            server.create(pod)
        assert refused.value.status == 422 and f"add {admission.SLOT}: 1" in str(refused.value.body)
        limits[admission.SLOT] = "1"
        spec = server.create(pod)["spec"]
    assert spec["schedulerName"] == scheduler.SCHEDULER == admission.SCHEDULER
    assert spec["containers"][0]["resources"]["limits"][admission.SLOT] == "1"
    assert admission.TOLERATION in spec["tolerations"] and not spec.get("schedulingGates")

    share = DeviceShare(
        index=0, uuid=objects.gpu_uuid(node, 0), memory_mib=4096, ceiling_percent=50, guaranteed_percent=10
    )
    claim = WorkloadClaim(
        namespace=scratch,
        name="infer",
        source="pod",
        kind="fraction",
        gpus=1,
        node=node,
        shares=(share,),
        sharing_mode="time-slicing",
        isolation="none",
    )
    with in_pool(server, node):
        (state,) = ops_for(server).sync_workloads([claim], tenant=scratch).states
        assert state.state == "allocated", state.message
        bound = server.get("v1", "Pod", "infer", scratch)
        assert bound["spec"]["nodeName"] == node
        assert bound["metadata"]["annotations"][scheduler.ANNOTATIONS["uuids"]] == share.uuid
    assert refused_to_nvke(server) == set()


def test_a_clusters_watches_share_one_http2_connection_and_see_a_change(target, scratch):
    """kube_sync's list-watches of a cluster (as its service account) go over one HTTP/2 connection, as
    kube-apiserver offers it by ALPN, and a change reaches them: here the scratch namespace becoming one
    NVKE manages."""
    server, _ = target
    ops = ops_for(server)
    changes: list[int] = []
    failures: list = []
    watch = ClusterWatch(
        ops,
        changed=lambda: None,
        workloads_changed=lambda: changes.append(1),
        failed=failures.append,
        dra=server.serves("resource.k8s.io/v1", "ResourceSlice"),
    ).start()
    try:
        eventually(server, lambda: all(w.resource_version for w in watch.watches), timeout=30)
        pool = streams.hub().pools[id(ops.core.api_client)]
        assert pool.http1 is None and pool.connection is not None and pool.connection.usable
        seen = len(changes)
        manage(server, scratch)
        eventually(server, lambda: len(changes) > seen, timeout=30)
        assert failures == []
    finally:
        watch.close(timeout=5)
