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
from nvke import bounded_yaml
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
    because NVKE cannot renew what they hand out. Parsed within bounds (nvke.bounded_yaml) and checked
    node by node: a wrong shape is refused naming its place in the document, never quoting it."""
    try:
        config = bounded_yaml.load(text)
    except bounded_yaml.BoundedYamlError as error:
        raise _refuse(f"The kubeconfig is refused: {error}.") from None
    if not isinstance(config, dict) or config.get("kind", "Config") != "Config":
        raise _refuse("The kubeconfig is not a kubectl Config document.")
    contexts = _named(config, "contexts", "context")
    current = _optional_str(config, "current-context", "current-context")
    context = contexts.get(current) or (next(iter(contexts.values())) if contexts else None)
    if context is None:
        raise _refuse("The kubeconfig has no context to use.")
    cluster_name = _optional_str(context, "cluster", "the context's cluster")
    user_name = _optional_str(context, "user", "the context's user")
    cluster = _named(config, "clusters", "cluster").get(cluster_name)
    user = _named(config, "users", "user").get(user_name)
    server = _optional_str(cluster or {}, "server", "the cluster's server")
    if not server:
        raise _refuse("The kubeconfig's context names a cluster that has no server.")
    token = _optional_str(user or {}, "token", "the user's token")
    if not token:
        kinds = sorted(
            set(user or {}) & {"client-certificate-data", "client-certificate", "exec", "auth-provider"}
        )
        raise _refuse(
            "The kubeconfig's user has no bearer token"
            + (f" (it uses {', '.join(kinds)})" if kinds else "")
            + ": apply NVKE's RBAC manifest and use its service account's token."
        )
    ca = ""
    if data := _optional_str(cluster, "certificate-authority-data", "certificate-authority-data"):
        try:
            ca = base64.b64decode(data, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise _refuse("certificate-authority-data is not base64 of a PEM bundle.") from None
    elif cluster.get("certificate-authority"):
        raise _refuse("The kubeconfig points to a CA file on disk: embed it as certificate-authority-data.")
    return server, token, ca


def _refuse(message: str) -> DomainError:
    return DomainError(message, field="kubeconfig", code="invalid_kubeconfig")


def _named(config: dict, key: str, inner: str) -> dict[str, dict]:
    """A kubeconfig list (clusters, users, contexts) as {name: its inner mapping}, each item checked."""
    items = config.get(key) or []
    if not isinstance(items, list):
        raise _refuse(f"The kubeconfig's {key} is not a list.")
    named = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _refuse(f"The kubeconfig's {key}[{index}] is not a mapping with a name.")
        body = item.get(inner) or {}
        if not isinstance(body, dict):
            raise _refuse(f"The kubeconfig's {key}[{index}].{inner} is not a mapping.")
        named.setdefault(item["name"], body)
    return named


def _optional_str(mapping: dict, key: str, what: str) -> str:
    """mapping[key] when it is a string, "" when absent; another type is refused naming `what`."""
    value = mapping.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _refuse(f"The kubeconfig's {what} is not a string.")
    return value
