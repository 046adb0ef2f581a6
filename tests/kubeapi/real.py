"""A real cluster behind the same seeding surface as FakeKubeApi (create, get, list, patch_merge,
delete, settle; url, ca_bundle), so one scenario runs on either. Named by NVKE_K8S_TEST_KUBECONFIG: its
current context is the test's admin (any credentials the official client loads: a token, kind's client
certificate); NVKE itself acts with the token of the service account its RBAC manifest creates
(nvke_token), never with the admin's, so every request NVKE makes is authorized by NVKE's ClusterRole and
judged by NVKE's admission policies as on a tenant's cluster."""

from __future__ import annotations

import base64
import os
import time
from typing import Any

from kubernetes import client, config, dynamic
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from nvke.providers.kubernetes import rbac

ENV = "NVKE_K8S_TEST_KUBECONFIG"
NODE_ENV = "NVKE_K8S_TEST_NODE"  # a GPU node the scenarios may cordon, drain, taint and publish for
TOKEN_WAIT_S = 30.0  # the token controller fills a new service-account token Secret within seconds


class RealKubeApi:
    real = True

    def __init__(self, configuration: client.Configuration):
        self.configuration = configuration
        self.url = configuration.host
        self.ca_bundle = ""
        if configuration.ssl_ca_cert:  # the loader writes certificate-authority-data to a file
            with open(configuration.ssl_ca_cert) as ca:
                self.ca_bundle = ca.read()
        self.api_client = client.ApiClient(configuration)
        self.dynamic = dynamic.DynamicClient(self.api_client)

    @classmethod
    def from_kubeconfig(cls, path: str) -> RealKubeApi:
        configuration = client.Configuration()
        config.load_kube_config(config_file=path, client_configuration=configuration)
        return cls(configuration)

    @classmethod
    def from_environment(cls) -> RealKubeApi | None:
        path = os.environ.get(ENV)
        return cls.from_kubeconfig(path) if path else None

    def as_token(self, token: str) -> RealKubeApi:
        """The same cluster, acting with a bearer token (a service account's) instead of the admin's."""
        configuration = client.Configuration(
            host=self.url, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
        )
        configuration.ssl_ca_cert = self.configuration.ssl_ca_cert
        return RealKubeApi(configuration)

    def account_token(self, namespace: str, secret: str) -> str:
        """The token the token controller put in a service-account token Secret (it fills it soon after
        the Secret is made, so a just-applied manifest gets a few seconds)."""
        deadline = time.monotonic() + TOKEN_WAIT_S
        while True:
            data = (self.get("v1", "Secret", secret, namespace) or {}).get("data") or {}
            if data.get("token"):
                return base64.b64decode(data["token"]).decode()
            if time.monotonic() > deadline:
                raise AssertionError(f"Secret {namespace}/{secret} got no token within {TOKEN_WAIT_S}s")
            time.sleep(0.5)

    def nvke_token(self) -> str:
        """NVKE's service account's token, from the Secret NVKE's RBAC manifest makes (apply it first:
        docs/operations.md, "Testing against a real cluster")."""
        return self.account_token(rbac.NAMESPACE, f"{rbac.ACCOUNT}-token")

    @property
    def minor(self) -> tuple[int, int]:
        info = client.VersionApi(self.api_client).get_code()
        return int(info.major), int("".join(ch for ch in info.minor if ch.isdigit()))

    def serves(self, api_version: str, kind: str) -> bool:
        try:
            self._resource(api_version, kind)
        except ResourceNotFoundError:
            return False
        return True

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
