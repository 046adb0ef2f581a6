"""KubernetesOperations and KubernetesInfrastructure against the fake API server, through the official
client over HTTPS: what they read, and exactly what they write."""

import pytest

from nvke.providers.base import ClusterRef, PoolSpec, ProviderError
from nvke.providers.kubernetes import gpus
from nvke.providers.kubernetes.infrastructure import KubernetesInfrastructure
from nvke.providers.kubernetes.operations import KubernetesOperations, driver_object_name
from tests.kubeapi import objects
from tests.nvke.providers.kubernetes.access import nvke_token

H100 = "NVIDIA H100 80GB HBM3"


def ref(server) -> ClusterRef:
    return ClusterRef(
        name="c1",
        endpoint=server.url,
        token=nvke_token(server),
        ca_bundle=server.ca_bundle,
        provider="kubernetes",
    )


def spec(**overrides) -> PoolSpec:
    fields = dict(
        cluster="c1",
        region="",
        name="train",
        gpu_model="h100-sxm5-80gb",
        gpu_memory_mib=81559,
        gpus_per_node=8,
        nvlink=True,
        driver_version="570.133.20",
        cpu_millicores_per_node=0,
        memory_mib_per_node=0,
        labels={"nvke.io/pool": "train", "nvke.io/sharing-mode": "exclusive"},
        gpu_product=H100,
    )
    return PoolSpec(**{**fields, **overrides})


def node(server, name):
    return server.get("v1", "Node", name)


def test_list_nodes_reads_the_pools_nodes_with_gfd_gpus(gpu_cluster):
    gpu_cluster.patch_merge("v1", "Node", "gpu-a", {"metadata": {"labels": {gpus.POOL_LABEL: "train"}}})
    ops = KubernetesOperations(ref(gpu_cluster))
    (info,) = ops.list_nodes("train")
    assert (info.name, info.pool, info.ready, len(info.gpus)) == ("gpu-a", "train", True, 8)
    assert info.driver_version == "570.133.20"
    assert {n.name for n in ops.list_nodes()} == {"gpu-a", "gpu-b", "gpu-c"}


def test_resource_slices_give_the_gpus_their_real_uuids(gpu_cluster):
    gpu_cluster.create(objects.resource_slice("gpu-a", 8))
    (info,) = [n for n in KubernetesOperations(ref(gpu_cluster)).list_nodes() if n.name == "gpu-a"]
    uuids = [g.uuid for g in info.gpus]
    slice_uuids = [
        d["attributes"]["uuid"]["string"]
        for d in gpu_cluster.list("resource.k8s.io/v1", "ResourceSlice")[0]["spec"]["devices"]
    ]
    assert uuids == slice_uuids


def test_cordon_and_uncordon_set_spec_unschedulable(gpu_cluster):
    ops = KubernetesOperations(ref(gpu_cluster))
    ops.cordon("gpu-a")
    assert node(gpu_cluster, "gpu-a")["spec"]["unschedulable"] is True
    ops.uncordon("gpu-a")
    assert not node(gpu_cluster, "gpu-a")["spec"].get("unschedulable")


def test_labels_are_set_and_removed(gpu_cluster):
    ops = KubernetesOperations(ref(gpu_cluster))
    ops.set_node_labels("gpu-a", {"team": "ml"})
    assert node(gpu_cluster, "gpu-a")["metadata"]["labels"]["team"] == "ml"
    ops.set_node_labels("gpu-a", {"team": None})
    assert "team" not in node(gpu_cluster, "gpu-a")["metadata"]["labels"]


def test_a_missing_node_is_not_found(gpu_cluster):
    with pytest.raises(ProviderError) as error:
        KubernetesOperations(ref(gpu_cluster)).cordon("nope")
    assert (error.value.reason, error.value.status) == ("NotFound", 404)


def test_server_errors_are_retried_and_a_storm_surfaces(gpu_cluster):
    ops = KubernetesOperations(ref(gpu_cluster))
    gpu_cluster.faults.fail("GET", r"^/api/v1/nodes$", 503, times=2)
    assert len(ops.list_nodes()) == 3, "two 503s are retried"
    gpu_cluster.faults.fail("GET", r"^/api/v1/nodes$", 429, times=10)
    with pytest.raises(ProviderError) as error:
        ops.list_nodes()
    assert error.value.reason == "TooManyRequests"


def test_a_dropped_connection_is_retried(gpu_cluster):
    gpu_cluster.faults.drop("GET", r"^/api/v1/nodes/gpu-a$", times=1)
    assert KubernetesOperations(ref(gpu_cluster)).driver_version("gpu-a") == "570.133.20"


# --- drain ---------------------------------------------------------------------------------------


def workload(server, name, node_name, labels=None, **kwargs):
    return server.create(objects.pod(name, node=node_name, labels=labels or {"app": "train"}, **kwargs))


def test_a_drain_evicts_workloads_and_leaves_daemonset_and_mirror_pods(gpu_cluster):
    workload(gpu_cluster, "job-1", "gpu-a")
    workload(gpu_cluster, "agent", "gpu-a", owner_kind="DaemonSet")
    workload(gpu_cluster, "static", "gpu-a", annotations={"kubernetes.io/config.mirror": "abc"})
    workload(gpu_cluster, "elsewhere", "gpu-b")
    gpu_cluster.settle()
    ops = KubernetesOperations(ref(gpu_cluster))
    assert ops.drain_status("gpu-a").done is False
    ops.drain("gpu-a")
    gpu_cluster.settle()
    assert node(gpu_cluster, "gpu-a")["spec"]["unschedulable"] is True
    left = {p["metadata"]["name"] for p in gpu_cluster.list("v1", "Pod", namespace="default")}
    assert left == {"agent", "static", "elsewhere"}
    evicted = [path for method, path, *_ in gpu_cluster.requests if path.endswith("/eviction")]
    assert evicted == ["/api/v1/namespaces/default/pods/job-1/eviction"]
    assert ops.drain_status("gpu-a").done


def test_a_budget_holds_the_drain_and_says_which(gpu_cluster):
    workload(gpu_cluster, "db-0", "gpu-a", labels={"app": "db"})
    gpu_cluster.create(objects.pdb("db-budget", selector={"app": "db"}, min_available=1))
    gpu_cluster.settle()
    ops = KubernetesOperations(ref(gpu_cluster))
    with pytest.raises(ProviderError) as error:
        ops.drain("gpu-a")
    assert error.value.reason == "DisruptionBudget" and "default/db-0" in error.value.message
    status = ops.drain_status("gpu-a")
    assert (status.done, status.blocked, status.pods_left) == (False, True, 1)
    assert "default/db-budget" in status.message
    gpu_cluster.delete("policy/v1", "PodDisruptionBudget", "db-budget", namespace="default")
    ops.drain("gpu-a")
    gpu_cluster.settle()
    assert ops.drain_status("gpu-a").done


def test_two_budgets_on_one_pod_stop_the_drain(gpu_cluster):
    workload(gpu_cluster, "db-0", "gpu-a", labels={"app": "db"})
    gpu_cluster.create(objects.pdb("one", selector={"app": "db"}, min_available=0))
    gpu_cluster.create(objects.pdb("two", selector={"app": "db"}, min_available=0))
    gpu_cluster.settle()
    ops = KubernetesOperations(ref(gpu_cluster))
    with pytest.raises(ProviderError) as error:
        ops.drain("gpu-a")
    assert error.value.reason == "EvictionMisconfigured"
    assert ops.drain_status("gpu-a").reason == "EvictionMisconfigured"


def test_a_pod_with_a_grace_period_counts_until_it_is_gone(gpu_cluster):
    gpu_cluster.actors.pod_grace_seconds = 30
    workload(gpu_cluster, "job-1", "gpu-a")
    gpu_cluster.settle()
    ops = KubernetesOperations(ref(gpu_cluster))
    ops.drain("gpu-a")
    status = ops.drain_status("gpu-a")
    assert (status.done, status.pods_left, status.blocked) == (False, 1, False)
    ops.drain("gpu-a")  # a repeated drain does not evict a pod already going
    assert sum(path.endswith("/eviction") for _, path, *_ in gpu_cluster.requests) == 1


# --- drivers -------------------------------------------------------------------------------------


def adopt_all(server):
    KubernetesInfrastructure(ref(server)).scale_pool(spec(), 3)


def test_a_driver_install_goes_through_an_nvidiadriver_and_gfd_reports_the_new_version(gpu_cluster):
    adopt_all(gpu_cluster)
    ops = KubernetesOperations(ref(gpu_cluster))
    ops.install_driver("gpu-a", "580.105.08")
    ops.install_driver("gpu-a", "580.105.08")  # idempotent
    driver = gpu_cluster.get("nvidia.com/v1alpha1", "NVIDIADriver", driver_object_name("train", "580.105.08"))
    assert driver["spec"]["upgradePolicy"]["autoUpgrade"] is False
    assert driver["spec"]["nodeSelector"] == {gpus.POOL_LABEL: "train", gpus.DRIVER_LABEL: "580.105.08"}
    pool_taint = {"key": gpus.POOL_LABEL, "operator": "Exists", "effect": "NoSchedule"}
    assert pool_taint in driver["spec"]["tolerations"]  # its pods run on the pool's tainted nodes
    daemonset = next(
        d
        for d in gpu_cluster.list("apps/v1", "DaemonSet")
        if d["metadata"]["labels"].get("nvidia.com/driver-name") == driver["metadata"]["name"]
    )
    assert pool_taint in daemonset["spec"]["template"]["spec"]["tolerations"]
    assert node(gpu_cluster, "gpu-a")["metadata"]["labels"][gpus.DRIVER_LABEL] == "580.105.08"
    gpu_cluster.settle()
    status = ops.driver_status("gpu-a")
    assert (status.version, status.busy, status.failure) == ("580.105.08", False, "")
    assert ops.driver_status("gpu-b").version == "570.133.20", "other nodes keep their driver"


def test_a_crash_looping_driver_fails_the_node(gpu_cluster):
    adopt_all(gpu_cluster)
    gpu_cluster.actors.crashloop_nodes.add("gpu-a")
    ops = KubernetesOperations(ref(gpu_cluster))
    ops.install_driver("gpu-a", "580.105.08")
    gpu_cluster.settle()
    status = ops.driver_status("gpu-a")
    assert "restarted" in status.failure


def test_a_validator_that_never_gets_ready_keeps_the_node_busy(gpu_cluster):
    adopt_all(gpu_cluster)
    gpu_cluster.actors.validator_never_ready.add("gpu-a")
    ops = KubernetesOperations(ref(gpu_cluster))
    ops.install_driver("gpu-a", "580.105.08")
    gpu_cluster.settle()
    status = ops.driver_status("gpu-a")
    assert status.busy and not status.failure


def test_an_nvidiadriver_whose_selector_conflicts_fails_the_install(gpu_cluster):
    adopt_all(gpu_cluster)
    gpu_cluster.create(
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": "everything"},
            "spec": {
                "driverType": "gpu",
                "version": "550.54.15",
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
            },
        }
    )
    ops = KubernetesOperations(ref(gpu_cluster))
    ops.install_driver("gpu-a", "580.105.08")
    gpu_cluster.settle()
    assert ops.driver_status("gpu-a").failure


# --- pools ---------------------------------------------------------------------------------------


def test_a_pool_adopts_matching_nodes_with_label_and_taint(gpu_cluster):
    gpu_cluster.create(objects.gpu_node("a100", product="NVIDIA-A100-SXM4-80GB"))
    gpu_cluster.create(objects.gpu_node("four-gpus", count=4))
    infra = KubernetesInfrastructure(ref(gpu_cluster))
    result = infra.scale_pool(spec(), 2)
    assert result.complete
    adopted = [
        n for n in gpu_cluster.list("v1", "Node") if n["metadata"]["labels"].get(gpus.POOL_LABEL) == "train"
    ]
    assert [n["metadata"]["name"] for n in adopted] == ["gpu-a", "gpu-b"]
    for n in adopted:
        assert {"key": gpus.POOL_LABEL, "value": "train", "effect": "NoSchedule"} in n["spec"]["taints"]
    short = infra.scale_pool(spec(), 5)
    assert (short.nodes, short.reason) == (3, "InsufficientCapacity"), "other models and counts never join"


def test_a_node_selector_narrows_the_candidates(gpu_cluster):
    gpu_cluster.patch_merge("v1", "Node", "gpu-c", {"metadata": {"labels": {"zone": "b"}}})
    result = KubernetesInfrastructure(ref(gpu_cluster)).scale_pool(spec(node_selector={"zone": "b"}), 1)
    assert result.complete
    assert node(gpu_cluster, "gpu-c")["metadata"]["labels"][gpus.POOL_LABEL] == "train"


def test_cordoned_and_not_ready_nodes_are_not_adopted(gpu_cluster):
    gpu_cluster.patch_merge("v1", "Node", "gpu-a", {"spec": {"unschedulable": True}})
    gpu_cluster.create(objects.gpu_node("gpu-d", ready=False))
    result = KubernetesInfrastructure(ref(gpu_cluster)).scale_pool(spec(), 4)
    assert result.nodes == 2


def test_scaling_down_and_deleting_release_nodes_and_keep_other_taints(gpu_cluster):
    infra = KubernetesInfrastructure(ref(gpu_cluster))
    infra.scale_pool(spec(), 3)
    theirs = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    current = node(gpu_cluster, "gpu-c")
    gpu_cluster.patch_merge("v1", "Node", "gpu-c", {"spec": {"taints": [*current["spec"]["taints"], theirs]}})
    assert infra.scale_pool(spec(), 2).complete
    released = node(gpu_cluster, "gpu-c")
    assert gpus.POOL_LABEL not in released["metadata"]["labels"]
    assert released["spec"]["taints"] == [theirs], "a taint NVKE did not set stays"
    infra.delete_pool("c1", "train")
    assert not [n for n in gpu_cluster.list("v1", "Node") if gpus.POOL_LABEL in n["metadata"]["labels"]]
    assert len(gpu_cluster.list("v1", "Node")) == 3, "NVKE never deletes a Node"


def test_a_shrinking_pool_releases_the_node_the_autoscaler_drained_first(gpu_cluster):
    infra = KubernetesInfrastructure(ref(gpu_cluster))
    assert infra.removes_chosen_nodes
    infra.scale_pool(spec(), 3)
    assert infra.scale_pool(spec(remove_first=("gpu-a",)), 2).complete
    assert gpus.POOL_LABEL not in node(gpu_cluster, "gpu-a")["metadata"]["labels"]
    assert {
        n: node(gpu_cluster, n)["metadata"]["labels"].get(gpus.POOL_LABEL) for n in ("gpu-b", "gpu-c")
    } == {
        "gpu-b": "train",
        "gpu-c": "train",
    }


def test_a_node_changed_between_read_and_patch_is_read_again(gpu_cluster):
    gpu_cluster.faults.conflict(r"^/api/v1/nodes/gpu-a$", times=1)
    assert KubernetesInfrastructure(ref(gpu_cluster)).scale_pool(spec(), 1).complete
    assert node(gpu_cluster, "gpu-a")["metadata"]["labels"][gpus.POOL_LABEL] == "train"


# --- mirroring into NVKE's rows ------------------------------------------------------------------


@pytest.mark.django_db
def test_a_resync_that_changes_nothing_writes_nothing_and_keeps_telemetrys_gpu_verdict(
    attach, gpu_cluster, make_attached_pool
):
    from claims.models import AllocationEvent
    from nodepools import nodes
    from nodepools.models import Gpu
    from nodepools.services import reconcile

    cluster = attach(gpu_cluster)
    pool = make_attached_pool(cluster, 3, max_nodes=3)
    resets = AllocationEvent.objects.filter(cluster=cluster, kind=AllocationEvent.Kind.RESET).count()
    reconcile(pool.pk)
    assert AllocationEvent.objects.filter(cluster=cluster, kind=AllocationEvent.Kind.RESET).count() == resets
    gpu = Gpu.objects.filter(node__pool=pool).order_by("pk").first()
    nodes.fail_gpu(gpu)  # a fatal XID, from telemetry: Kubernetes knows nothing of it
    reconcile(pool.pk)
    gpu.refresh_from_db()
    assert gpu.healthy is False
    gpu_cluster.patch_merge("v1", "Node", "gpu-a", {"spec": {"unschedulable": True}})
    reconcile(pool.pk)
    assert (
        AllocationEvent.objects.filter(cluster=cluster, kind=AllocationEvent.Kind.RESET).count() > resets + 1
    )


@pytest.mark.django_db
def test_detaching_releases_the_nodes_and_leaves_the_cluster_running(attach, gpu_cluster, make_attached_pool):
    from clusters.models import Cluster
    from clusters.services import delete_cluster, teardown

    cluster = attach(gpu_cluster)
    make_attached_pool(cluster, 2, max_nodes=3)
    assert sum(gpus.POOL_LABEL in n["metadata"]["labels"] for n in gpu_cluster.list("v1", "Node")) == 2
    delete_cluster(cluster)
    teardown(cluster.pk)
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    nodes = gpu_cluster.list("v1", "Node")
    assert len(nodes) == 3 and not any(gpus.POOL_LABEL in n["metadata"]["labels"] for n in nodes)
    assert not any(n["spec"].get("taints") for n in nodes), "NVKE's taint went with its label"
