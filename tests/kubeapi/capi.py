"""Cluster API on the fake API server (the management cluster): cluster-api's CRDs (core,
controlplane/kubeadm, bootstrap/kubeadm) and those of its add-on provider for Helm (CAAPH:
HelmChartProxy, HelmReleaseProxy), loaded unchanged from ../shared/upstream/ (tests/kubeapi/crds.py;
its README names the commits), so that every write is checked against the schemas, defaults and CEL
rules a real management cluster serves. Cluster API serves v1beta2 (the storage version since v1.11)
and v1beta1; NVKE speaks v1beta2.

The infrastructure provider is a stand-in (`infrastructure.fake.nvke.io`): NVKE only copies an
operator's cluster template and references machine templates by name, so their specs stay open. Its
machine templates carry `spec.template.spec.gpu` ({product, count}), which the simulated machines boot
with."""

from __future__ import annotations

from typing import Any

from . import crds

CORE, CONTROL_PLANE, BOOTSTRAP = (
    "cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
)
INFRA = "infrastructure.fake.nvke.io"
VERSION = "v1beta2"
ADDONS, ADDONS_VERSION = "addons.cluster.x-k8s.io", "v1alpha1"

_INFRA_OPEN = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def _infra_crd(kind: str, status: bool = True) -> dict[str, Any]:
    """A CRD of the stand-in infrastructure provider, labelled with the contract it speaks."""
    plural = kind.lower() + "s"
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": _INFRA_OPEN},
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{INFRA}", "labels": {f"{CORE}/{VERSION}": VERSION}},
        "spec": {
            "group": INFRA,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "scope": "Namespaced",
            "versions": [version],
        },
    }


INFRA_CRDS = (
    _infra_crd("FakeCluster"),
    _infra_crd("FakeClusterTemplate", status=False),
    _infra_crd("FakeMachineTemplate", status=False),
)


def install(server, namespace: str = "nvke", helm: bool = True) -> None:
    """Serve Cluster API's upstream CRDs (with `helm`, CAAPH's too; the test skips where they are absent)
    and the stand-in infrastructure provider's on a FakeKubeApi (the management cluster) with
    a namespace for NVKE's objects, a cluster template and the control plane's machine template (see
    `machine_template`)."""
    crds.require()
    upstream = crds.CLUSTER_API + (crds.HELM_ADDON_PROVIDER if helm else ())
    for definition in [crds.installed(path) for path in upstream] + list(INFRA_CRDS):
        server.create(definition)
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    server.create(
        {
            "apiVersion": f"{INFRA}/{VERSION}",
            "kind": "FakeClusterTemplate",
            "metadata": {"name": "gpu-cloud", "namespace": namespace},
            "spec": {"template": {"spec": {"region": "eu-west-1", "network": "gpu-fabric"}}},
        }
    )
    server.create(machine_template("control-plane", namespace=namespace, gpu=None))


def machine_template(
    name: str, *, namespace: str = "nvke", gpu: dict[str, Any] | None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """An infrastructure machine template; `gpu` ({product, count}) is what its machines boot with."""
    spec: dict[str, Any] = {"flavor": name}
    if gpu:
        spec["gpu"] = gpu
    return {
        "apiVersion": f"{INFRA}/{VERSION}",
        "kind": "FakeMachineTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"template": {"spec": spec}},
    }
