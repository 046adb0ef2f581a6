"""The kubeconfig a tenant downloads for a cluster: its API endpoint as a cluster entry, a user entry with
the cluster-admin bearer token issued at provisioning, and a context joining them, named after the cluster.

The token is decrypted from `Cluster.admin_token` only here, for the response; it never goes to logs, the
audit log or the cluster's API representation. A cluster provisioned before tokens were issued has none:
its user entry stays empty and the file says how to add credentials (`kubectl config set-credentials`).
The UI page (`cluster-kubeconfig`) and the API (`GET /api/v1/clusters/{id}/kubeconfig/`) both render it;
both are for members and up (the token can change the cluster), never viewers or read-only tokens."""

import base64

import yaml

from clusters.models import Cluster
from nvke import kubeconfigs
from nvke.errors import DomainError

HEADER = """\
# kubeconfig for NVKE cluster {name} ({region}), Kubernetes {version}.
"""
HEADER_TOKEN = """\
# It holds a cluster-admin bearer token: keep it secret, as you would a password.
"""
HEADER_NO_TOKEN = """\
# NVKE records no credentials for this cluster yet: add yours to user {user!r}, e.g.
#   kubectl --kubeconfig {filename} config set-credentials {user} --token=<token>
"""


def kubeconfig_filename(cluster: Cluster) -> str:
    return f"{cluster.name}-kubeconfig.yaml"


def kubeconfig_yaml(cluster: Cluster, username: str) -> str:
    """A kubeconfig (YAML) for a cluster that has an endpoint."""
    name = f"nvke-{cluster.tenant.slug}-{cluster.name}"
    user = f"{name}-{username}"
    token = cluster.admin_token
    server = {"server": cluster.endpoint}
    if cluster.ca_bundle:  # kubectl then trusts the cluster's own CA for this endpoint only
        server["certificate-authority-data"] = base64.b64encode(cluster.ca_bundle.encode()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": server}],
        "users": [{"name": user, "user": {"token": token} if token else {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
        "current-context": name,
        "preferences": {},
    }
    header = HEADER + (HEADER_TOKEN if token else HEADER_NO_TOKEN)
    header = header.format(
        name=cluster.name,
        region=cluster.region.name,
        version=cluster.kubernetes_version.version,
        user=user,
        filename=kubeconfig_filename(cluster),
    )
    return header + yaml.safe_dump(config, sort_keys=False)


def parse_kubeconfig(text: str) -> tuple[str, str, str]:
    """(endpoint, bearer token, CA bundle PEM) of a kubeconfig's current context, for attaching a cluster.
    NVKE keeps a bearer token only: client certificates, exec plugins and auth providers are refused,
    because NVKE cannot renew what they hand out; so is tls-server-name, which NVKE does not keep.
    Parsed and checked by nvke.kubeconfigs: a wrong shape is refused naming its place in the document,
    never quoting it."""
    try:
        context = kubeconfigs.current_context(text)
        token = kubeconfigs.string(context.user, "token", "the user's token")
    except kubeconfigs.Refused as refused:
        raise _refuse(str(refused)) from None
    if context.tls_server_name:  # an attached cluster keeps its endpoint, token and CA: no other name
        raise _refuse(
            "The kubeconfig's cluster sets tls-server-name, which NVKE does not honour for an attached "
            "cluster: give a server URL whose name (or address) the certificate holds."
        )
    if not token:
        kinds = sorted(
            set(context.user) & {"client-certificate-data", "client-certificate", "exec", "auth-provider"}
        )
        raise _refuse(
            "The kubeconfig's user has no bearer token"
            + (f" (it uses {', '.join(kinds)})" if kinds else "")
            + ": apply NVKE's RBAC manifest and use its service account's token."
        )
    return context.server, token, context.ca_pem


def _refuse(message: str) -> DomainError:
    return DomainError(message, field="kubeconfig", code="invalid_kubeconfig")
