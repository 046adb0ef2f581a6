"""A kubeconfig from someone else (a tenant attaching a cluster, the operator's management cluster, the
Secret Cluster API writes for a new cluster), read within bounds (nvke.bounded_yaml) and checked node by
node. Only what is inline is taken: a file path (`certificate-authority`, `client-certificate`,
`tokenFile`) would have NVKE read its own disk, and `exec` / `auth-provider` would have it run a
command, so the callers refuse them, naming the field. Messages name a place in the document and never
quote it."""

import base64
from dataclasses import dataclass, field

from nvke import bounded_yaml


class Refused(ValueError):
    """Why the kubeconfig is refused, in a message that quotes none of it."""


@dataclass(frozen=True)
class Context:
    """The current context's cluster and user (the first context's without current-context)."""

    server: str
    ca_pem: str  # "" when the cluster entry embeds no CA: the system's CAs are used
    user: dict = field(repr=False)  # the user entry's mapping, as given: each caller takes what it can use


def current_context(text: str) -> Context:
    try:
        config = bounded_yaml.load(text)
    except bounded_yaml.BoundedYamlError as error:
        raise Refused(f"The kubeconfig is refused: {error}.") from None
    if not isinstance(config, dict) or config.get("kind", "Config") != "Config":
        raise Refused("The kubeconfig is not a kubectl Config document.")
    contexts = _named(config, "contexts", "context")
    current = string(config, "current-context", "current-context")
    context = contexts.get(current) or (next(iter(contexts.values())) if contexts else None)
    if context is None:
        raise Refused("The kubeconfig has no context to use.")
    cluster_name = string(context, "cluster", "the context's cluster")
    user_name = string(context, "user", "the context's user")
    cluster = _named(config, "clusters", "cluster").get(cluster_name) or {}
    user = _named(config, "users", "user").get(user_name) or {}
    server = string(cluster, "server", "the cluster's server")
    if not server:
        raise Refused("The kubeconfig's context names a cluster that has no server.")
    if cluster.get("certificate-authority"):
        raise Refused("The kubeconfig points to a CA file on disk: embed it as certificate-authority-data.")
    return Context(server, decoded(cluster, "certificate-authority-data", "a PEM bundle"), user)


def string(mapping: dict, key: str, what: str) -> str:
    """mapping[key] when it is a string, "" when absent; another type is refused naming `what`."""
    value = mapping.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Refused(f"The kubeconfig's {what} is not a string.")
    return value


def decoded(mapping: dict, key: str, what: str) -> str:
    """The text base64 `mapping[key]` holds ("" when absent), refused naming `key` when it is not."""
    if not (data := string(mapping, key, key)):
        return ""
    try:
        return base64.b64decode(data, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise Refused(f"{key} is not base64 of {what}.") from None


def _named(config: dict, key: str, inner: str) -> dict[str, dict]:
    """A kubeconfig list (clusters, users, contexts) as {name: its inner mapping}, each item checked."""
    items = config.get(key) or []
    if not isinstance(items, list):
        raise Refused(f"The kubeconfig's {key} is not a list.")
    named = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise Refused(f"The kubeconfig's {key}[{index}] is not a mapping with a name.")
        body = item.get(inner) or {}
        if not isinstance(body, dict):
            raise Refused(f"The kubeconfig's {key}[{index}].{inner} is not a mapping.")
        named.setdefault(item["name"], body)
    return named
