"""NVKE's own access to a cluster Cluster API made: Cluster API writes the cluster's admin kubeconfig to
the Secret `<cluster>-kubeconfig` (key `value`), usually with a client certificate, which NVKE cannot
renew or hand to tenants. With it NVKE creates, once, a ServiceAccount bound to cluster-admin and a
long-lived token Secret for it (kube-system/nvke-admin), and keeps that token: the ClusterAccess every
other call (and the tenant's kubeconfig) uses, as for an attached cluster."""

import base64

from kubernetes import client

from nvke.providers.base import ClusterAccess, ProviderError
from nvke.providers.kubernetes.client import call, read

from . import kubeconfig

NAMESPACE = "kube-system"
ACCOUNT = "nvke-admin"
TOKEN_SECRET = "nvke-admin-token"
KUBECONFIG_KEY = "value"


def kubeconfig_secret(cluster: str) -> str:
    return f"{cluster}-kubeconfig"


def admin_kubeconfig(secret: dict) -> str:
    data = (secret.get("data") or {}).get(KUBECONFIG_KEY)
    if not data:
        name = secret["metadata"]["name"]
        raise ProviderError("InvalidKubeconfig", f"Secret {name} has no {KUBECONFIG_KEY!r} key.")
    return base64.b64decode(data).decode()


def _create(method, *args) -> None:
    try:
        call(method, *args)
    except ProviderError as error:
        if error.status != 409:  # made by an earlier step
            raise


def service_account_access(admin: str) -> ClusterAccess | None:
    """Ensure NVKE's ServiceAccount, its cluster-admin binding and its token Secret; the access with the
    token, or None while the cluster's token controller has not filled the Secret in yet."""
    api = kubeconfig.api_client(admin)
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    labels = {"app.kubernetes.io/managed-by": "nvke"}
    _create(
        core.create_namespaced_service_account, NAMESPACE, {"metadata": {"name": ACCOUNT, "labels": labels}}
    )
    binding = {
        "metadata": {"name": ACCOUNT, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
    }
    _create(rbac.create_cluster_role_binding, binding)
    secret = {
        "metadata": {
            "name": TOKEN_SECRET,
            "labels": labels,
            "annotations": {"kubernetes.io/service-account.name": ACCOUNT},
        },
        "type": "kubernetes.io/service-account-token",
    }
    _create(core.create_namespaced_secret, NAMESPACE, secret)
    token = (read(core.read_namespaced_secret, TOKEN_SECRET, NAMESPACE).get("data") or {}).get("token")
    if not token:
        return None
    return ClusterAccess(
        endpoint=api.configuration.host,
        token=base64.b64decode(token).decode(),
        ca_bundle=kubeconfig.ca_bundle(api),
    )
