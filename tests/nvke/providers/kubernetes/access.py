"""NVKE's access to the fake API server: the token of NVKE's own service account, as an admin who applied
NVKE's access manifest hands it over; and what NVKE asked, checked against that manifest."""

import yaml

from nvke.providers.kubernetes import rbac
from tests.kubeapi import accounts
from tests.kubeapi.server import FakeKubeApi


def nvke_token(server, manifest: str | None = None) -> str:
    """Apply NVKE's access manifest (or an older `manifest`) to the fake and return NVKE's service-account
    token, with which every request NVKE makes is authorized by that manifest's ClusterRole. On a real
    cluster (tests/kubeapi/real.py) the manifest is applied by whoever set it up: the token is read from
    the Secret it made."""
    if not isinstance(server, FakeKubeApi):
        return server.nvke_token()
    accounts.apply(server, yaml.safe_load(manifest or rbac.manifest()))
    return accounts.token(server, rbac.NAMESPACE, f"{rbac.ACCOUNT}-token")


def ungranted(requests: list[tuple]) -> set[tuple[str, str, str]]:
    """The (group, resource, verb) of the fake API server's `requests` that NVKE's access manifest does
    not grant: each would be a 403, on a real cluster as on the fake (tests/kubeapi/authorization.py)."""
    granted = {(rule.group, rule.resource, verb) for rule in rbac.RULES for verb in rule.verbs}
    verbs = {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
    asked = set()
    for method, path, query, _ in requests:
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            group, rest = "", parts[2:]
        elif parts[0] == "apis" and len(parts) > 3:
            group, rest = parts[1], parts[3:]
        else:
            continue  # discovery and /version
        if not rest or group == "authorization.k8s.io":
            continue  # discovery, and the access reviews anyone may ask
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            rest = rest[2:]  # a namespaced resource
        resource = "/".join(rest[0:3:2])  # "pods", or "pods/binding" past the name
        verb = verbs[method]
        if method == "GET" and len(rest) == 1:
            verb = "watch" if query.get("watch") in ("true", "1") else "list"
        asked.add((group, resource, verb))
    return asked - granted
