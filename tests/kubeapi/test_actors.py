"""The simulated kubelet, GPU Operator (NVIDIADriver controller, OnDelete DaemonSets, validator) and GFD."""

import pytest
from kubernetes import client

from tests.kubeapi import objects

DRIVER_PODS = "app.kubernetes.io/component=nvidia-driver"


def driver_pods(kubeapi) -> dict[str, str]:
    """node -> the image of its (not terminating) driver pod."""
    return {
        p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"]
        for p in kubeapi.list("v1", "Pod", "gpu-operator", label_selector=DRIVER_PODS)
        if "deletionTimestamp" not in p["metadata"]
    }


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def condition(obj: dict, kind: str) -> dict:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


@pytest.fixture
def cluster(kubeapi):
    """Three H100 nodes in pool a (two) and b (one), each with a ResourceSlice, and the GPU Operator."""
    for name, pool in [("gpu-1", "a"), ("gpu-2", "a"), ("gpu-3", "b")]:
        node = kubeapi.create(
            objects.gpu_node(name, labels={"nvke.io/pool": pool, "nvke.io/driver": "570.133.20"})
        )
        kubeapi.create(objects.resource_slice(node, 2))
    kubeapi.create(objects.gpu_node("cpu-1", labels={"nvidia.com/gpu.present": "false"}))
    objects.gpu_operator(kubeapi)
    return kubeapi


def test_the_kubelet_runs_scheduled_pods_on_ready_nodes(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1"))
    kubeapi.create(objects.gpu_node("down", ready=False))
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_pod("default", objects.pod("up", node="gpu-1"))
    core.create_namespaced_pod("default", objects.pod("stuck", node="down"))
    running = core.read_namespaced_pod("up", "default")
    assert running.status.phase == "Running" and running.status.start_time is not None
    assert {c.type: c.status for c in running.status.conditions}["Ready"] == "True"
    assert (
        running.status.container_statuses[0].ready and running.status.container_statuses[0].restart_count == 0
    )
    assert core.read_namespaced_pod("stuck", "default").status.phase == "Pending"


def test_pods_on_a_node_that_goes_down_are_left_as_they_are(kubeapi):
    kubeapi.actors.pod_grace_seconds = 5
    kubeapi.create(objects.gpu_node("gpu-1"))
    kubeapi.create(objects.pod("web", node="gpu-1"))
    node = kubeapi.get("v1", "Node", "gpu-1")
    node["status"]["conditions"][0]["status"] = "False"
    kubeapi.update(node)
    kubeapi.delete("v1", "Pod", "web")
    kubeapi.settle(60)
    stuck = kubeapi.get("v1", "Pod", "web")
    assert "deletionTimestamp" in stuck["metadata"] and stuck["status"]["phase"] == "Running"  # Terminating
    node["status"]["conditions"][0]["status"] = "True"
    kubeapi.update(node)
    assert kubeapi.get("v1", "Pod", "web") is None


def test_switched_off_the_kubelet_runs_nothing(kubeapi):
    kubeapi.actors.kubelet = False
    kubeapi.create(objects.gpu_node("gpu-1"))
    kubeapi.create(objects.pod("web", node="gpu-1"))
    kubeapi.settle()
    assert kubeapi.get("v1", "Pod", "web")["status"] == {"phase": "Pending"}


def test_an_nvidiadriver_runs_a_driver_pod_on_each_matching_node(cluster, kube_client):
    custom = client.CustomObjectsApi(kube_client)
    driver = objects.nvidia_driver("pool-a-570", version="570.133.20", node_selector={"nvke.io/pool": "a"})
    custom.create_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers", driver)
    image = "nvcr.io/nvidia/driver:570.133.20-ubuntu22.04"
    assert driver_pods(cluster) == {"gpu-1": image, "gpu-2": image}
    pod = cluster.get("v1", "Pod", "nvidia-gpu-driver-pool-a-570-gpu-1", "gpu-operator")
    assert pod["metadata"]["labels"]["nvidia.com/driver-name"] == "pool-a-570" and ready(pod)
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "DaemonSet",
        "nvidia-gpu-driver-pool-a-570",
        True,
    )
    ds = client.AppsV1Api(kube_client).read_namespaced_daemon_set(
        "nvidia-gpu-driver-pool-a-570", "gpu-operator"
    )
    assert ds.spec.update_strategy.type == "OnDelete"
    assert ds.metadata.owner_references[0].kind == "NVIDIADriver"
    labels = {n: cluster.get("v1", "Node", n)["metadata"]["labels"] for n in ("gpu-1", "gpu-2", "gpu-3")}
    assert [labels[n].get("nvidia.com/gpu-operator.driver.owner") for n in ("gpu-1", "gpu-2", "gpu-3")] == [
        "pool-a-570",
        "pool-a-570",
        None,
    ]
    status = custom.get_cluster_custom_object_status("nvidia.com", "v1alpha1", "nvidiadrivers", "pool-a-570")[
        "status"
    ]
    assert status["state"] == "ready" and condition({"status": status}, "Ready")["status"] == "True"
    validators = cluster.list("v1", "Pod", "gpu-operator", label_selector="app=nvidia-operator-validator")
    assert sorted(p["spec"]["nodeName"] for p in validators) == ["gpu-1", "gpu-2", "gpu-3"]  # GPU nodes only
    assert [ready(p) for p in validators] == [True, True, False]  # gpu-3 has no driver yet


def test_relabelling_a_node_moves_it_to_the_other_driver_and_gfd_reports_the_new_version(
    cluster, kube_client
):
    cluster.create(
        objects.nvidia_driver("a-570", version="570.133.20", node_selector={"nvke.io/driver": "570.133.20"})
    )
    cluster.create(
        objects.nvidia_driver("a-580", version="580.65.06", node_selector={"nvke.io/driver": "580.65.06"})
    )
    assert set(driver_pods(cluster)) == {"gpu-1", "gpu-2", "gpu-3"}
    core = client.CoreV1Api(kube_client)
    core.patch_node("gpu-2", {"metadata": {"labels": {"nvke.io/driver": "580.65.06"}}})
    assert driver_pods(cluster)["gpu-2"] == "nvcr.io/nvidia/driver:580.65.06-ubuntu22.04"
    assert cluster.get("v1", "Pod", "nvidia-gpu-driver-a-570-gpu-2", "gpu-operator") is None
    node = core.read_node("gpu-2").metadata.labels
    assert node["nvidia.com/gpu-operator.driver.owner"] == "a-580"
    assert (node["nvidia.com/cuda.driver-version.full"], node["nvidia.com/cuda.driver-version.major"]) == (
        "580.65.06",
        "580",
    )
    assert (
        node["nvidia.com/cuda.driver-version.minor"],
        node["nvidia.com/cuda.driver-version.revision"],
    ) == ("65", "06")
    assert node["nvidia.com/cuda.driver.major"] == "580"
    assert core.read_node("gpu-1").metadata.labels["nvidia.com/cuda.driver-version.full"] == "570.133.20"
    resource_slice = client.ResourceV1Api(kube_client).read_resource_slice("gpu-2-gpu.nvidia.com")
    assert {d.attributes["driverVersion"].version for d in resource_slice.spec.devices} == {"580.65.06"}
    assert resource_slice.spec.pool.generation == 2


def test_driver_pods_terminate_within_their_grace_period(cluster):
    cluster.actors.pod_grace_seconds = 30
    cluster.create(
        objects.nvidia_driver("a-570", version="570.133.20", node_selector={"nvke.io/driver": "570.133.20"})
    )
    cluster.create(
        objects.nvidia_driver("a-580", version="580.65.06", node_selector={"nvke.io/driver": "580.65.06"})
    )
    cluster.patch_merge("v1", "Node", "gpu-1", {"metadata": {"labels": {"nvke.io/driver": "580.65.06"}}})
    assert (
        "deletionTimestamp"
        in cluster.get("v1", "Pod", "nvidia-gpu-driver-a-570-gpu-1", "gpu-operator")["metadata"]
    )
    assert ready(cluster.get("v1", "Pod", "nvidia-gpu-driver-a-580-gpu-1", "gpu-operator"))
    cluster.settle(30)
    assert cluster.get("v1", "Pod", "nvidia-gpu-driver-a-570-gpu-1", "gpu-operator") is None
    # Restarting a driver pod (OnDelete): its replacement, of the same name, comes once it is gone.
    cluster.delete("v1", "Pod", "nvidia-gpu-driver-a-580-gpu-1", "gpu-operator")
    assert (
        "deletionTimestamp"
        in cluster.get("v1", "Pod", "nvidia-gpu-driver-a-580-gpu-1", "gpu-operator")["metadata"]
    )
    assert not ready(cluster.get("v1", "Pod", "nvidia-operator-validator-gpu-1", "gpu-operator"))
    cluster.settle(30)
    replacement = cluster.get("v1", "Pod", "nvidia-gpu-driver-a-580-gpu-1", "gpu-operator")
    assert "deletionTimestamp" not in replacement["metadata"] and ready(replacement)
    assert ready(cluster.get("v1", "Pod", "nvidia-operator-validator-gpu-1", "gpu-operator"))


def test_a_version_bump_changes_the_template_but_not_running_pods(cluster, kube_client):
    cluster.create(objects.nvidia_driver("all", version="570.133.20"))
    before = cluster.get("v1", "Pod", "nvidia-gpu-driver-all-gpu-1", "gpu-operator")
    custom = client.CustomObjectsApi(kube_client)
    custom.patch_cluster_custom_object(
        "nvidia.com", "v1alpha1", "nvidiadrivers", "all", {"spec": {"version": "580.65.06"}}
    )
    assert set(driver_pods(cluster).values()) == {"nvcr.io/nvidia/driver:570.133.20-ubuntu22.04"}  # OnDelete
    revisions = client.AppsV1Api(kube_client).list_namespaced_controller_revision(
        "gpu-operator", label_selector="app=nvidia-gpu-driver-all"
    )
    newest = max(revisions.items, key=lambda r: r.revision)
    assert [r.revision for r in revisions.items if r is not newest] == [1] and newest.revision == 2
    assert (
        before["metadata"]["labels"]["controller-revision-hash"]
        != newest.metadata.labels["controller-revision-hash"]
    )
    client.CoreV1Api(kube_client).delete_namespaced_pod("nvidia-gpu-driver-all-gpu-1", "gpu-operator")
    after = cluster.get("v1", "Pod", "nvidia-gpu-driver-all-gpu-1", "gpu-operator")
    assert after["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/driver:580.65.06-ubuntu22.04"
    assert (
        after["metadata"]["labels"]["controller-revision-hash"]
        == newest.metadata.labels["controller-revision-hash"]
    )
    assert (
        cluster.get("v1", "Node", "gpu-1")["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"]
        == "580.65.06"
    )


def test_a_crash_looping_driver_is_never_ready(cluster):
    cluster.actors.crashloop_nodes.add("gpu-1")
    cluster.create(objects.nvidia_driver("all", version="580.65.06"))
    pod = cluster.get("v1", "Pod", "nvidia-gpu-driver-all-gpu-1", "gpu-operator")
    container = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Running" and not ready(pod)
    assert container["restartCount"] > 10 and container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert not ready(cluster.get("v1", "Pod", "nvidia-operator-validator-gpu-1", "gpu-operator"))
    assert (
        cluster.get("v1", "Node", "gpu-1")["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"]
        == "570.133.20"
    )
    driver = cluster.get("nvidia.com/v1alpha1", "NVIDIADriver", "all")
    assert driver["status"]["state"] == "notReady"
    cluster.actors.crashloop_nodes.clear()
    cluster.settle()
    assert ready(cluster.get("v1", "Pod", "nvidia-gpu-driver-all-gpu-1", "gpu-operator"))
    assert cluster.get("nvidia.com/v1alpha1", "NVIDIADriver", "all")["status"]["state"] == "ready"


def test_a_validator_can_be_kept_from_ever_being_ready(cluster):
    cluster.actors.validator_never_ready.add("gpu-2")
    cluster.create(objects.nvidia_driver("all", version="570.133.20"))
    validators = {
        p["spec"]["nodeName"]: ready(p)
        for p in cluster.list("v1", "Pod", "gpu-operator", label_selector="app=nvidia-operator-validator")
    }
    assert validators == {"gpu-1": True, "gpu-2": False, "gpu-3": True}
    assert ready(cluster.get("v1", "Pod", "nvidia-gpu-driver-all-gpu-2", "gpu-operator"))
    assert cluster.get("nvidia.com/v1", "ClusterPolicy", "cluster-policy")["status"]["state"] == "notReady"


def test_overlapping_selectors_raise_conflicting_node_selector_on_both(cluster, kube_client):
    cluster.create(objects.nvidia_driver("pool-a", version="570.133.20", node_selector={"nvke.io/pool": "a"}))
    cluster.create(
        objects.nvidia_driver("old-570", version="570.133.20", node_selector={"nvke.io/driver": "570.133.20"})
    )
    assert list(driver_pods(cluster)) == ["gpu-3"]  # gpu-1 and gpu-2 are matched by both: neither runs there
    custom = client.CustomObjectsApi(kube_client)
    for name in ("pool-a", "old-570"):
        status = custom.get_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers", name)["status"]
        error = condition({"status": status}, "Error")
        assert status["state"] == "notReady" and condition({"status": status}, "Ready")["status"] == "False"
        assert (error["status"], error["reason"]) == ("True", "ConflictingNodeSelector")
        assert error["message"] == "multiple NVIDIADrivers match the same node gpu-1: [old-570 pool-a]"
    assert (
        "nvidia.com/gpu-operator.driver.owner" not in cluster.get("v1", "Node", "gpu-1")["metadata"]["labels"]
    )
    custom.delete_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers", "old-570")
    assert set(driver_pods(cluster)) == {"gpu-1", "gpu-2"}
    assert cluster.get("nvidia.com/v1alpha1", "NVIDIADriver", "pool-a")["status"]["state"] == "ready"
    assert (
        client.AppsV1Api(kube_client)
        .list_namespaced_daemon_set("gpu-operator", label_selector=DRIVER_PODS)
        .items[0]
        .metadata.name
        == "nvidia-gpu-driver-pool-a"
    )


def test_without_use_nvidia_driver_crd_nvidiadrivers_are_disabled(kubeapi):
    kubeapi.create(objects.gpu_node("gpu-1"))
    objects.gpu_operator(kubeapi, use_nvidia_driver_crd=False)
    kubeapi.create(objects.nvidia_driver("all", version="570.133.20"))
    assert driver_pods(kubeapi) == {}
    driver = kubeapi.get("nvidia.com/v1alpha1", "NVIDIADriver", "all")
    assert driver["status"]["state"] == "disabled"
    assert condition(driver, "Error")["message"] == "useNvidiaDriverCRD is not enabled in ClusterPolicy"


def test_switched_off_the_operator_and_gfd_do_nothing(cluster):
    cluster.actors.gpu_operator = False
    cluster.create(objects.nvidia_driver("all", version="580.65.06"))
    assert driver_pods(cluster) == {} and "status" not in cluster.get(
        "nvidia.com/v1alpha1", "NVIDIADriver", "all"
    )
    cluster.actors.gfd = False
    cluster.actors.gpu_operator = True
    cluster.settle()
    assert set(driver_pods(cluster)) == {"gpu-1", "gpu-2", "gpu-3"}
    assert (
        cluster.get("v1", "Node", "gpu-1")["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"]
        == "570.133.20"
    )


def test_pdb_status_is_kept_current(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1"))
    kubeapi.create(objects.pdb("web", selector={"app": "web"}, max_unavailable="50%"))
    policy = client.PolicyV1Api(kube_client)
    assert policy.read_namespaced_pod_disruption_budget("web", "default").status.expected_pods == 0
    for i in range(4):
        kubeapi.create(objects.pod(f"web-{i}", node="gpu-1", labels={"app": "web"}))
    status = policy.read_namespaced_pod_disruption_budget("web", "default").status
    assert (
        status.expected_pods,
        status.desired_healthy,
        status.current_healthy,
        status.disruptions_allowed,
    ) == (4, 2, 4, 2)
    assert status.conditions[0].type == "DisruptionAllowed" and status.conditions[0].status == "True"
