"""Upstream CustomResourceDefinitions and chart values, read unchanged from ../shared/upstream/ (its
README names each file's repository and commit). A stand-in that trimmed them would accept what a real
cluster refuses; tests that need them skip, saying why, where the folder is absent."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

# The repository's sibling `shared/upstream`; NVKE_UPSTREAM names another copy.
UPSTREAM = Path(os.environ.get("NVKE_UPSTREAM", Path(__file__).resolve().parents[3] / "shared" / "upstream"))
ABSENT = f"needs the upstream CRDs and chart values in {UPSTREAM} (see its README); absent here"

CLUSTER_API = (
    "cluster-api/cluster.x-k8s.io_clusters.yaml",
    "cluster-api/cluster.x-k8s.io_machinedeployments.yaml",
    "cluster-api/cluster.x-k8s.io_machinesets.yaml",
    "cluster-api/cluster.x-k8s.io_machines.yaml",
    "cluster-api/cluster.x-k8s.io_machinehealthchecks.yaml",
    "cluster-api/controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml",
    "cluster-api/bootstrap.cluster.x-k8s.io_kubeadmconfigs.yaml",
    "cluster-api/bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml",
)
HELM_ADDON_PROVIDER = (
    "cluster-api-addon-provider-helm/addons.cluster.x-k8s.io_helmchartproxies.yaml",
    "cluster-api-addon-provider-helm/addons.cluster.x-k8s.io_helmreleaseproxies.yaml",
)
GPU_OPERATOR = ("gpu-operator/nvidia.com_clusterpolicies.yaml", "gpu-operator/nvidia.com_nvidiadrivers.yaml")
GPU_OPERATOR_VALUES = "gpu-operator/chart-values.yaml"
DRA_DRIVER_VALUES = "k8s-dra-driver-gpu/chart-values.yaml"

# What the providers' kustomizations add at install (cluster-api `controlplane/kubeadm/config/crd/
# kustomization.yaml` labels): the contract labels, which say which version speaks which contract.
_INSTALL_LABELS = {"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta2"}


def available() -> bool:
    return UPSTREAM.is_dir()


def require() -> None:
    """Skip the calling test, saying why, where the upstream folder is absent."""
    if not available():
        pytest.skip(ABSENT)


@functools.cache
def _read(relative: str) -> str:
    with open(UPSTREAM / relative, encoding="utf-8") as f:
        return json.dumps(yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def load(relative: str) -> dict[str, Any]:
    """An upstream YAML file as published (a fresh copy each call; through JSON, five times faster than
    deepcopy on a 360 kB CRD)."""
    return json.loads(_read(relative))


def installed(relative: str) -> dict[str, Any]:
    """An upstream CRD as it stands in a cluster after its provider's install: its schema untouched, the
    install labels added."""
    crd = load(relative)
    crd["metadata"].setdefault("labels", {}).update(_INSTALL_LABELS)
    return crd
