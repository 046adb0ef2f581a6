"""What the both-targets scenarios share: the real cluster NVKE_K8S_TEST_KUBECONFIG names (skipped with the
reason without it), the stand-in reached as a real cluster is (a kubeconfig, the admin's credentials over
HTTPS, NVKE with its own service account's token), and the steps a scenario takes on either."""

from __future__ import annotations

import base64
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from nvke.providers.base import ClusterRef, DeviceShare, WorkloadClaim
from nvke.providers.kubernetes import dra, gpus, records
from nvke.providers.kubernetes.operations import KubernetesOperations
from tests.kubeapi import objects
from tests.kubeapi.real import ENV, NODE_ENV, RealKubeApi
from tests.kubeapi.server import FakeKubeApi
from tests.kubeapi.tls import client_material

from .access import nvke_token

PAUSE_IMAGE = os.environ.get("NVKE_K8S_TEST_IMAGE", "registry.k8s.io/pause:3.10")
POOL = "nvke-test"  # the pool label and taint value a scenario gives the node for its length


def real_target() -> tuple[RealKubeApi, str]:
    """(the real cluster, its GPU node), or the test skipped saying what to set."""
    real = RealKubeApi.from_environment()
    if real is None:
        pytest.skip(f"opt-in: set {ENV} (and {NODE_ENV}) to run on a real cluster (docs/operations.md)")
    if not os.environ.get(NODE_ENV):
        pytest.skip(f"{NODE_ENV} names the GPU node the scenarios may cordon, drain and taint")
    return real, os.environ[NODE_ENV]


class ThroughKubeconfig(RealKubeApi):
    """The stand-in behind the real-cluster adapter: every seeding call goes over HTTPS as the cluster's
    admin (admission applies, as on a real cluster); settle() lets the stand-in's clock run."""

    def __init__(self, fake: FakeKubeApi, directory: Path, *, client_certificate: bool = False):
        path = directory / "kubeconfig"
        path.write_text(kubeconfig_for(fake, client_certificate=client_certificate))
        configuration = RealKubeApi.from_kubeconfig(str(path)).configuration
        super().__init__(configuration)
        self.fake = fake

    def settle(self, seconds: float = 0.0) -> None:
        self.fake.settle(seconds)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig_for(server: FakeKubeApi, *, client_certificate: bool = False) -> str:
    """The stand-in's admin kubeconfig: its token, or (as kind writes one) a client certificate."""
    if client_certificate:
        certificate, key = client_material()
        user = {"client-certificate-data": _b64(certificate), "client-key-data": _b64(key)}
    else:
        user = {"token": server.token}
    cluster = {"server": server.url, "certificate-authority-data": _b64(server.ca_bundle)}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )


def stand_in(fake: FakeKubeApi, directory: Path) -> ThroughKubeconfig:
    """A GPU cluster on the stand-in as docs/operations.md sets up a kind test cluster: the GPU
    Operator, the DRA driver's DeviceClass, NVKE's manifest applied (its service account, role and
    admission policies), one GPU node `gpu-a`; reached, as kind's kubeconfig does, with the admin's
    client certificate."""
    objects.gpu_operator(fake)
    fake.create(objects.device_class())
    fake.create(objects.gpu_node("gpu-a", count=1))
    nvke_token(fake)  # applies NVKE's manifest
    fake.settle()
    return ThroughKubeconfig(fake, directory, client_certificate=True)


def ops_for(server) -> KubernetesOperations:
    return KubernetesOperations(
        ClusterRef(
            name="t",
            endpoint=server.url,
            token=nvke_token(server),
            ca_bundle=server.ca_bundle,
            provider="kubernetes",
        )
    )


def eventually(server, check, timeout: float = 120.0):
    """The fake settles at once; a real cluster gets time (pods start, evictions finish)."""
    deadline = time.monotonic() + timeout
    while True:
        server.settle(31)
        if result := check():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s")
        time.sleep(0.5)


def manage(server, namespace: str) -> None:
    """The test's namespace, managed by NVKE for a tenant of the test's own (named as the namespace)."""
    labels = {dra.MANAGED: "true", dra.TENANT: namespace}
    server.patch_merge("v1", "Namespace", namespace, {"metadata": {"labels": labels}})


@contextlib.contextmanager
def published(server, node: str, name: str) -> Iterator[dict]:
    """The node's `gpu.nvidia.com` ResourceSlice: the one NVIDIA's DRA driver publishes on a GPU cluster
    (a second slice of its pool would leave the pool incomplete to kube-scheduler), else one of one device
    made for the test (its pool named as the node, as NVIDIA's kubelet plugin names it), deleted
    afterwards."""
    slices = server.list("resource.k8s.io/v1", "ResourceSlice")
    if driver := [
        s for s in slices if s["spec"].get("nodeName") == node and s["spec"]["driver"] == gpus.DRA_DRIVER
    ]:
        yield driver[0]
        return
    body = objects.resource_slice(node, 1)
    body["metadata"]["name"] = f"{name}-{node}"
    body["spec"]["pool"]["name"] = node
    server.create(body)
    try:
        yield body
    finally:
        server.delete("resource.k8s.io/v1", "ResourceSlice", body["metadata"]["name"])


@contextlib.contextmanager
def in_pool(server, node: str) -> Iterator[None]:
    """The node in pool POOL for the scenario's length, with the taint NVKE gives a pool's nodes; its
    pool label, NVKE's snapshot annotation and its taints put back afterwards."""
    was = server.get("v1", "Node", node)
    labels = {gpus.POOL_LABEL: (was["metadata"].get("labels") or {}).get(gpus.POOL_LABEL)}
    # NVKE's scheduler path writes its snapshot of the node's GPUs there
    annotations = {records.SNAPSHOT: (was["metadata"].get("annotations") or {}).get(records.SNAPSHOT)}
    taints = was["spec"].get("taints") or []
    taint = {"key": gpus.POOL_LABEL, "value": POOL, "effect": "NoSchedule"}
    pooled = {"metadata": {"labels": {gpus.POOL_LABEL: POOL}}, "spec": {"taints": [*taints, taint]}}
    server.patch_merge("v1", "Node", node, pooled)
    try:
        yield
    finally:
        back = {
            "metadata": {"labels": labels, "annotations": annotations},
            "spec": {"taints": taints or None},
        }
        server.patch_merge("v1", "Node", node, back)


def whole_gpu(namespace: str, name: str, node: str) -> WorkloadClaim:
    """A claim of the node's first GPU, whole, as NVKE's allocator places one."""
    share = DeviceShare(
        index=0,
        uuid=objects.gpu_uuid(node, 0),
        memory_mib=81559,
        ceiling_percent=100,
        guaranteed_percent=100,
        exclusive=True,
    )
    return WorkloadClaim(
        namespace=namespace,
        name=name,
        source="api",
        kind="whole",
        gpus=1,
        node=node,
        shares=(share,),
        sharing_mode="exclusive",
        isolation="exclusive",
    )


def claim_pod(name: str, namespace: str, claim: str, **spec) -> dict:
    """A pod using the ResourceClaim `claim`, with `spec` fields of its own (gates, tolerations)."""
    pod = objects.pod(name, namespace=namespace, image=PAUSE_IMAGE)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    pod["spec"].update(spec)
    return pod
