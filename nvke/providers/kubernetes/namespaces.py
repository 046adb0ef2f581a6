"""Which of a cluster's namespaces NVKE acts in for one tenant. A namespace is NVKE's when labelled
`nvke.io/managed=true`, and one tenant's when labelled `nvke.io/tenant=<slug>`: a managed namespace no
tenant holds yet becomes the tenant's whose NVKE acts in it first (a merge patch under its
resourceVersion, so of two tenants that attached the same cluster one wins), and a namespace NVKE makes
for a claim is made with both labels. Requests in other namespaces are left alone."""

from nvke.providers.base import ProviderError

from .client import read
from .dra import MANAGED, TENANT

MERGE = "application/merge-patch+json"


class Namespaces:
    """The cluster's namespaces as one tenant's NVKE sees them in one pass: `own` are the ones it acts in."""

    def __init__(self, core, tenant: str):
        self.core, self.tenant = core, tenant
        self.found = {ns["metadata"]["name"]: ns for ns in read(core.list_namespace)["items"]}
        self.own = {name for name, namespace in list(self.found.items()) if self._take(name, namespace)}

    def _take(self, name: str, namespace: dict) -> bool:
        """Whether the namespace is this tenant's, labelling a managed one that names no tenant yet."""
        meta = namespace["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(MANAGED) != "true":
            return False
        if TENANT not in labels:
            patch = {
                "metadata": {"resourceVersion": meta["resourceVersion"], "labels": {TENANT: self.tenant}}
            }
            try:
                self.found[name] = namespace = read(
                    self.core.patch_namespace, name, patch, _content_type=MERGE
                )
            except ProviderError as error:
                if error.status not in (403, 404, 409):
                    raise
                # gone, or another tenant's NVKE labelled it first (the next pass sees which), or NVKE's
                # RBAC predates patching namespaces: left alone until someone labels it
                return False
        return namespace["metadata"]["labels"][TENANT] == self.tenant

    def unusable(self, namespace: str) -> str:
        """Why NVKE may not make a claim's ResourceClaim in `namespace` ("" when it may). A namespace
        missing is made, managed and this tenant's."""
        found = self.found.get(namespace)
        if found is None:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            body["metadata"]["labels"] = {MANAGED: "true", TENANT: self.tenant}
            try:
                self.found[namespace] = read(self.core.create_namespace, body)
            except ProviderError as error:
                if error.status != 409:
                    raise
                return f"Namespace {namespace} was made meanwhile; NVKE looks at it again."
            self.own.add(namespace)
            return ""
        if namespace in self.own:
            return ""
        labels = found["metadata"].get("labels") or {}
        if labels.get(MANAGED) != "true":
            return (
                f"Namespace {namespace} is not managed by NVKE: label it {MANAGED}=true "
                "to let NVKE place GPU claims in it."
            )
        if TENANT not in labels:
            return (
                f"Namespace {namespace} names no tenant and NVKE could not label it: label it "
                f"{TENANT}={self.tenant}, or apply NVKE's access manifest again (it patches namespaces)."
            )
        return f"Namespace {namespace} belongs to another tenant: NVKE places no claim of yours in it."
