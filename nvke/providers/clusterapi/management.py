"""The management cluster as the provider reaches it: the admin's ManagementCluster row (kubeconfig, or
the file NVKE_CAPI_KUBECONFIG names), NVKE's namespace there, and typed reads and writes of its objects
through the official client's CustomObjectsApi, errors mapped to ProviderErrors."""

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cachetools
from django.conf import settings
from kubernetes import client

from nvke import caches
from nvke.encryption import Undecryptable
from nvke.providers.base import ProviderError
from nvke.providers.kubernetes.client import call, read

from . import kubeconfig
from .models import ManagementCluster

MERGE = "application/merge-patch+json"
CORE_PLURALS = {  # Cluster API's own kinds; an infrastructure provider's come from discovery
    "Cluster": "clusters",
    "MachineDeployment": "machinedeployments",
    "Machine": "machines",
    "MachineHealthCheck": "machinehealthchecks",
    "KubeadmControlPlane": "kubeadmcontrolplanes",
    "KubeadmConfigTemplate": "kubeadmconfigtemplates",
}


@dataclass(frozen=True)
class TemplateRef:
    """An infrastructure object named in the settings as Kind/name."""

    api_version: str
    kind: str
    name: str

    @property
    def ref(self) -> dict[str, str]:
        """As a v1beta2 ContractVersionedObjectReference (Cluster API finds the version itself)."""
        return {"apiGroup": self.api_version.partition("/")[0], "kind": self.kind, "name": self.name}


def _template(api_version: str, setting: str, field: str) -> TemplateRef:
    kind, _, name = setting.partition("/")
    if not (kind and name):
        raise ProviderError(
            "NotConfigured", f"The Cluster API setting {field} must be Kind/name, not {setting!r}."
        )
    return TemplateRef(api_version, kind, name)


def load() -> "Management":
    row = ManagementCluster.objects.order_by("pk").first()
    if row is None:
        raise ProviderError(
            "NotConfigured",
            "No Cluster API management cluster is configured (admin: Cluster API → Management cluster).",
        )
    return Management(row)


class Management:
    def __init__(self, row: ManagementCluster):
        text = row.kubeconfig
        if isinstance(text, Undecryptable):
            raise ProviderError(
                "SecretUndecryptable",
                "The management cluster's kubeconfig does not decrypt with NVKE_ENCRYPTION_KEY: restore the "
                "key it was stored with, or paste the kubeconfig again.",
            )
        if not text and settings.NVKE_CAPI_KUBECONFIG:
            try:
                text = Path(settings.NVKE_CAPI_KUBECONFIG).read_text()
            except OSError as error:
                raise ProviderError(
                    "NotConfigured", f"NVKE_CAPI_KUBECONFIG cannot be read: {error}"
                ) from None
        if not text:
            raise ProviderError(
                "NotConfigured", "The management cluster has no kubeconfig (setting or NVKE_CAPI_KUBECONFIG)."
            )
        self.api = kubeconfig.api_client(text)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.namespace = row.namespace
        self.infrastructure = row.infrastructure_api_version
        self.cluster_template = _template(self.infrastructure, row.cluster_template, "cluster_template")
        self.control_plane_template = _template(
            self.infrastructure, row.control_plane_machine_template, "control_plane_machine_template"
        )
        self.versions: dict[str, str] = row.kubernetes_versions or {}

    def release(self, minor: str) -> str:
        """The Kubernetes release (v1.34.2) Cluster API is to run for a catalog minor version (1.34)."""
        if minor.count(".") >= 2:
            return minor if minor.startswith("v") else f"v{minor}"
        if release := self.versions.get(minor.removeprefix("v")):
            return release if release.startswith("v") else f"v{release}"
        raise ProviderError(
            "UnsupportedVersion",
            f"The Cluster API settings name no release of Kubernetes {minor} (kubernetes_versions).",
        )

    # ---- objects in NVKE's namespace ---------------------------------------------------------------------

    def plural(self, api_version: str, kind: str) -> str:
        if api_version != self.infrastructure and kind in CORE_PLURALS:
            return CORE_PLURALS[kind]
        return _discovered_plural(self.custom, api_version, kind)

    def _path(self, api_version: str, kind: str) -> tuple[str, str, str, str]:
        group, _, version = api_version.partition("/")
        return group, version, self.namespace, self.plural(api_version, kind)

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        try:
            return read(self.custom.get_namespaced_custom_object, *self._path(api_version, kind), name)
        except ProviderError as error:
            if error.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, label_selector: str = "") -> list[dict[str, Any]]:
        body = read(
            self.custom.list_namespaced_custom_object,
            *self._path(api_version, kind),
            label_selector=label_selector,
        )
        return body.get("items") or []

    def ensure(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object of that name as it is, created from `obj` if there is none: a repeated step costs
        one read."""
        if existing := self.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"]):
            return existing
        path = self._path(obj["apiVersion"], obj["kind"])
        try:
            return call(self.custom.create_namespaced_custom_object, *path, obj)
        except ProviderError as error:
            if error.status != 409:
                raise
        existing = self.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        if existing is None:  # made and deleted since our read: the next step creates it
            raise ProviderError(
                "Conflict", f"{obj['kind']} {obj['metadata']['name']} is being replaced.", status=409
            )
        return existing

    def patch(self, api_version: str, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        path = self._path(api_version, kind)
        return call(self.custom.patch_namespaced_custom_object, *path, name, patch, _content_type=MERGE)

    def delete(self, api_version: str, kind: str, name: str) -> None:
        """Delete the object (Cluster API's controllers finish it); one already gone is no error."""
        try:
            call(self.custom.delete_namespaced_custom_object, *self._path(api_version, kind), name)
        except ProviderError as error:
            if error.status != 404:
                raise

    def secret(self, name: str) -> dict[str, Any] | None:
        try:
            return read(self.core.read_namespaced_secret, name, self.namespace)
        except ProviderError as error:
            if error.status == 404:
                return None
            raise


# (management host, apiVersion, kind) -> resource name: a few kinds per management cluster.
_PLURALS = caches.bounded("nvke.providers.clusterapi.plurals", 256)


@cachetools.cached(
    _PLURALS,
    key=lambda custom, api_version, kind: (custom.api_client.configuration.host, api_version, kind),
    lock=threading.Lock(),  # cachetools' caches are not thread-safe; the watches run in threads
)
def _discovered_plural(custom: client.CustomObjectsApi, api_version: str, kind: str) -> str:
    """The resource name of an infrastructure kind, from the management cluster's discovery (once)."""
    group, _, version = api_version.partition("/")
    resources = read(custom.get_api_resources, group, version).get("resources") or []
    names = [r["name"] for r in resources if r.get("kind") == kind and "/" not in r["name"]]
    if not names:
        raise ProviderError(
            "NotFound", f"The management cluster serves no {kind} in {api_version}.", status=404
        )
    return names[0]
