"""A real cluster behind the same seeding surface as FakeKubeApi (create, get, list, patch_merge,
delete, settle; url, token, ca_bundle), so one scenario runs on either. Named by
NVKE_K8S_TEST_KUBECONFIG: its current context must use a bearer token (NVKE keeps nothing else), with
the rights of NVKE's RBAC manifest plus creating and deleting namespaces, pods and PodDisruptionBudgets."""

from __future__ import annotations

import os
from typing import Any

from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import NotFoundError

from clusters.kubeconfig import parse_kubeconfig

ENV = "NVKE_K8S_TEST_KUBECONFIG"
NODE_ENV = "NVKE_K8S_TEST_NODE"  # a GPU node the scenarios may cordon and drain


class RealKubeApi:
    real = True

    def __init__(self, kubeconfig: str):
        with open(kubeconfig) as config:
            self.url, self.token, self.ca_bundle = parse_kubeconfig(config.read())
        configuration = client.Configuration(
            host=self.url, api_key={"BearerToken": self.token}, api_key_prefix={"BearerToken": "Bearer"}
        )
        configuration.ca_cert_data = self.ca_bundle or None
        self.dynamic = dynamic.DynamicClient(client.ApiClient(configuration))

    @classmethod
    def from_environment(cls) -> RealKubeApi | None:
        path = os.environ.get(ENV)
        return cls(path) if path else None

    def _resource(self, api_version: str, kind: str):
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        return resource.create(body=obj, namespace=obj["metadata"].get("namespace")).to_dict()

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self._resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def list(self, api_version: str, kind: str, namespace: str | None = None, **selectors: str) -> list[dict]:
        return self._resource(api_version, kind).get(namespace=namespace, **selectors).to_dict()["items"]

    def patch_merge(self, api_version: str, kind: str, name: str, patch: dict, namespace: str | None = None):
        resource = self._resource(api_version, kind)
        return resource.patch(
            body=patch, name=name, namespace=namespace, content_type="application/merge-patch+json"
        ).to_dict()

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            self._resource(api_version, kind).delete(name=name, namespace=namespace)
        except NotFoundError:
            pass

    def settle(self, seconds: float = 0.0) -> None:
        """A real cluster's components run on their own."""
