"""Service accounts for tests: apply a manifest as `kubectl apply -f` would to a fresh cluster, and read the
token the token controller put in an account's token Secret."""

from __future__ import annotations

import base64
from typing import Any

from .errors import ApiError
from .server import FakeKubeApi

RBAC = "rbac.authorization.k8s.io/v1"


def apply(server: FakeKubeApi, document: dict[str, Any]) -> None:
    """Create each object of a document (a v1 List or one object); what already exists is left as it is."""
    for obj in document["items"] if document.get("kind") == "List" else [document]:
        try:
            server.create(obj)
        except ApiError as error:
            if error.code != 409:
                raise


def token(server: FakeKubeApi, namespace: str, secret: str) -> str:
    data = server.get("v1", "Secret", secret, namespace)["data"]
    return base64.b64decode(data["token"]).decode()


def grant(
    server: FakeKubeApi, rules: list[dict[str, Any]], name: str = "tester", namespace: str = "default"
) -> str:
    """A service account bound cluster-wide to a ClusterRole of these rules; its token."""
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    apply(
        server,
        {
            "kind": "List",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace},
                },
                {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules},
                {
                    "apiVersion": RBAC,
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": [subject],
                },
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "kubernetes.io/service-account-token",
                    "metadata": {
                        "name": f"{name}-token",
                        "namespace": namespace,
                        "annotations": {"kubernetes.io/service-account.name": name},
                    },
                },
            ],
        },
    )
    return token(server, namespace, f"{name}-token")
