"""A kubeconfig from someone else (a tenant attaching a cluster, the operator's management cluster, the
Secret Cluster API writes for a new cluster), read within bounds (nvke.bounded_yaml) and checked node by
node. Only what is inline is taken: a file path (`certificate-authority`, `client-certificate`,
`tokenFile`) would have NVKE read its own disk, and `exec` / `auth-provider` would have it run a
command, so the callers refuse them, naming the field. Settings that change how the server is reached
or whom NVKE acts as and that NVKE does not honour are refused here, naming the field, rather than dropped
(the connection would be other than the document says): `insecure-skip-tls-verify: true` (NVKE always
verifies the server's certificate), `proxy-url` (NVKE calls the server directly, at an address the policy
checked) and impersonation (`as`, `as-uid`, `as-groups`, `as-user-extra`: NVKE would act as the
credentials' own identity). `tls-server-name` is handed to the caller, which honours or refuses it;
`disable-compression`, `namespace` and `extensions` change nothing that matters here and are ignored.
Fields as in kubernetes/kubernetes staging/src/k8s.io/client-go/tools/clientcmd/api/v1/types.go.
Messages name a place in the document and never quote it."""

import base64
from dataclasses import dataclass, field

from nvke import bounded_yaml

# A user entry's impersonation fields: NVKE acts as its credentials' identity, never another.
IMPERSONATION = ("as", "as-uid", "as-groups", "as-user-extra")


class Refused(ValueError):
    """Why the kubeconfig is refused, in a message that quotes none of it."""


@dataclass(frozen=True)
class Context:
    """The current context's cluster and user (the first context's without current-context)."""

    server: str
    ca_pem: str  # "" when the cluster entry embeds no CA: the system's CAs are used
    user: dict = field(repr=False)  # the user entry's mapping, as given: each caller takes what it can use
    tls_server_name: str = ""  # the name to check the server's certificate for, when not the server's


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
    if cluster.get("insecure-skip-tls-verify") not in (None, False):
        raise Refused(
            "The kubeconfig's cluster sets insecure-skip-tls-verify, which NVKE does not honour: it always "
            "verifies the server's certificate. Embed the cluster's CA as certificate-authority-data."
        )
    if cluster.get("proxy-url"):
        raise Refused(
            "The kubeconfig's cluster sets proxy-url, which NVKE does not honour: it calls the server "
            "directly, at an address the policy checked."
        )
    if used := [key for key in IMPERSONATION if key in user]:
        raise Refused(
            f"The kubeconfig's user sets {used[0]} (impersonation), which NVKE does not honour: it would act "
            "as the credentials' own identity. Give credentials of the identity to act as."
        )
    return Context(
        server,
        decoded(cluster, "certificate-authority-data", "a PEM bundle"),
        user,
        string(cluster, "tls-server-name", "the cluster's tls-server-name"),
    )


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
