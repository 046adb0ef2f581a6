"""One scenario, two management clusters: the fake (with Cluster API's simulated controllers) always, and a
real one when NVKE_CAPI_TEST_KUBECONFIG names it (skipped with the reason otherwise). The scenario makes a
cluster, waits until it serves and NVKE's token works, grows a one-node GPU pool, upgrades the control
plane a minor (1.34 → 1.35) and waits until every control plane machine runs it, replaces the pool's
node's machine with one on 1.35 (as a pool's Kubernetes upgrade does after draining it) and follows it to
its successor, then deletes both. A difference between the two targets means the fake is wrong. See
docs/operations.md."""

import os
import time

import pytest

from nvke.providers.base import ClusterRef, PoolSpec, ProvisioningInProgress
from nvke.providers.clusterapi.infrastructure import ClusterAPIInfrastructure
from nvke.providers.clusterapi.models import ManagementCluster
from nvke.providers.clusterapi.operations import ClusterAPIOperations

ENV = "NVKE_CAPI_TEST_KUBECONFIG"
REAL = {  # the setting's fields on a real management cluster, from the environment
    "namespace": ("NVKE_CAPI_TEST_NAMESPACE", "nvke"),
    "infrastructure_api_version": (
        "NVKE_CAPI_TEST_INFRASTRUCTURE",
        "infrastructure.cluster.x-k8s.io/v1beta2",
    ),
    "cluster_template": ("NVKE_CAPI_TEST_CLUSTER_TEMPLATE", ""),
    "control_plane_machine_template": ("NVKE_CAPI_TEST_CONTROL_PLANE_TEMPLATE", ""),
}
RELEASE_ENV, GPU_MODEL_ENV = "NVKE_CAPI_TEST_RELEASE", "NVKE_CAPI_TEST_GPU_MODEL"
NEXT_RELEASE_ENV = "NVKE_CAPI_TEST_NEXT_RELEASE"  # the release of 1.35 the control plane moves to
REAL_TIMEOUT_S = 1800  # a real control plane and a GPU machine take minutes


def until(step, timeout: float, interval: float):
    """Repeat a provider step until it stops raising ProvisioningInProgress or answers truthy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if result := step():
                return result
        except ProvisioningInProgress as waiting:
            if time.monotonic() > deadline:
                raise AssertionError(f"still waiting after {timeout}s: {waiting.message}") from None
        else:
            if time.monotonic() > deadline:
                raise AssertionError(f"not done after {timeout}s")
        time.sleep(interval)


def scenario(*, key: str, gpu_model: str, timeout: float, interval: float, settle=lambda: None) -> None:
    infrastructure = ClusterAPIInfrastructure(ClusterRef(key, "", "", provider="clusterapi"))

    def provisioned():
        settle()
        return infrastructure.provision_cluster(key, "", 1, "1.34")

    try:
        access = until(provisioned, timeout, interval)
        ops = ClusterAPIOperations(ClusterRef(key, access.endpoint, access.token, access.ca_bundle))
        assert ops.list_nodes("gpu") == []  # NVKE's own token is accepted

        spec = PoolSpec(
            cluster=key,
            region="",
            name="gpu",
            gpu_model=gpu_model,
            gpu_memory_mib=0,
            gpus_per_node=0,
            nvlink=False,
            driver_version="",
            cpu_millicores_per_node=0,
            memory_mib_per_node=0,
            labels={"nvke.io/pool": "gpu"},
            kubernetes_version="1.34",
            min_nodes=1,
            max_nodes=1,
        )

        def scaled():
            settle()
            return infrastructure.scale_pool(spec, 1).complete

        until(scaled, timeout, interval)
        assert [node.pool for node in ops.list_nodes("gpu")] == ["gpu"]

        def upgraded():
            settle()
            return infrastructure.upgrade_control_plane(key, "1.35") == "1.35"

        until(upgraded, timeout, interval)

        (old,) = [node.name for node in ops.list_nodes("gpu")]
        ops.replace_node(old, "1.35")

        def replaced():
            settle()
            status = ops.machine_status(old)
            gone = old not in [node.name for node in ops.list_nodes("gpu")]
            return (
                gone
                and not status.busy
                and status.ready
                and status.kubelet_version.startswith("v1.35")
                and status
            )

        successor = until(replaced, timeout, interval).replaced_by
        assert successor and successor != old
        assert [(n.name, n.kubelet_version[:5]) for n in ops.list_nodes("gpu")] == [(successor, "v1.35")]
    finally:
        infrastructure.delete_pool(key, "gpu")
        infrastructure.delete_cluster(key)


def test_on_the_fake(capi_setting, cluster_api, workload, management):
    cluster_api.workloads["nvke-e2e"] = workload
    scenario(key="nvke-e2e", gpu_model="h100-sxm5-80gb", timeout=5, interval=0.01, settle=management.settle)


@pytest.mark.skipif(
    not os.environ.get(ENV),
    reason=f"opt-in: set {ENV} (see docs/operations.md) to run on a real management cluster",
)
def test_on_a_real_management_cluster(db):
    with open(os.environ[ENV]) as config:
        kubeconfig = config.read()
    fields = {name: os.environ.get(env, default) for name, (env, default) in REAL.items()}
    releases = {
        "1.34": os.environ.get(RELEASE_ENV, "v1.34.2"),
        "1.35": os.environ.get(NEXT_RELEASE_ENV, "v1.35.1"),
    }
    ManagementCluster.objects.create(kubeconfig=kubeconfig, kubernetes_versions=releases, **fields)
    scenario(
        key=f"nvke-e2e-{int(time.time())}",
        gpu_model=os.environ.get(GPU_MODEL_ENV, "h100-sxm5-80gb"),
        timeout=REAL_TIMEOUT_S,
        interval=10,
    )
