"""What NVKE's service account may do on an attached cluster: one list of rules is both the ClusterRole
an admin applies and the SelfSubjectAccessReviews `attach` makes, so the two never drift apart."""

from dataclasses import dataclass

import yaml
from kubernetes import client

from . import admission, records
from .account import ACCOUNT, NAMESPACE
from .client import call


@dataclass(frozen=True)
class Rule:
    group: str
    resource: str  # "pods" or a subresource path such as "pods/eviction"
    verbs: tuple[str, ...]
    why: str
    needs_dra: bool = False  # checked only where the cluster serves resource.k8s.io/v1


# Least privilege both ways: every verb here is one NVKE uses, and NVKE uses no other
# (tests/nvke/providers/kubernetes/test_least_privilege.py runs its scenarios as this account to check).
RULES: tuple[Rule, ...] = (
    Rule("", "nodes", ("get", "list", "watch", "patch"), "read GPU nodes; label, taint and cordon them"),
    Rule(
        "",
        "pods",
        ("list", "watch", "patch"),
        "find the pods a drain evicts and the driver pods; lift NVKE's scheduling gate",
    ),
    Rule("", "pods/eviction", ("create",), "drain nodes through the Eviction API"),
    Rule("", "pods/binding", ("create",), "bind the pods NVKE schedules (schedulerName: nvke)"),
    Rule(
        "",
        "namespaces",
        ("list", "watch", "create", "patch"),
        "find (and follow) the namespaces NVKE manages and mark them its tenant's; make a claim's",
    ),
    Rule("", "events", ("create",), "record what NVKE did on the objects it touched"),
    Rule("policy", "poddisruptionbudgets", ("list",), "say which budget holds a drain back"),
    Rule("nvidia.com", "clusterpolicies", ("list",), "find the GPU Operator's configuration"),
    Rule(
        "nvidia.com",
        "nvidiadrivers",
        ("get", "list", "watch", "create"),
        "upgrade drivers through the GPU Operator",
    ),
    Rule("resource.k8s.io", "resourceslices", ("list", "watch"), "read GPUs from DRA", True),
    Rule(
        "resource.k8s.io",
        "resourceclaims",
        ("get", "list", "watch", "create", "patch", "delete"),
        "make, adopt and release the claims of GPU workloads",
        True,
    ),
    Rule("resource.k8s.io", "resourceclaims/status", ("patch",), "write NVKE's allocations", True),
    # From 1.36 (DRAResourceClaimGranularStatusAuthorization, beta and on) a change to status.allocation or
    # status.reservedFor also needs the synthetic subresource resourceclaims/binding (kubernetes/kubernetes
    # pkg/registry/resource/resourceclaim/strategy.go). Older servers never ask about it.
    Rule(
        "resource.k8s.io",
        "resourceclaims/binding",
        ("patch",),
        "write NVKE's allocations on Kubernetes 1.36+",
        True,
    ),
    Rule(
        "resource.k8s.io",
        "deviceclasses",
        ("list",),
        "check NVIDIA's DRA driver made its DeviceClasses (attach)",
        True,
    ),
    Rule(
        "apps", "daemonsets", ("list",), "read the DRA driver's kubelet plugin feature gates (attach)", True
    ),
    *(
        Rule(
            "admissionregistration.k8s.io",
            resource,
            ("get",),
            "check NVKE's admission policies are applied and current (attach)",
        )
        for resource in (
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
        )
    ),
    # Gangs (gangs.py): scheduler-plugins' PodGroups, and Kubernetes' own where its Workload API serves
    Rule("scheduling.x-k8s.io", "podgroups", ("list",), "read the minimum of each pod group (gang)"),
    Rule("scheduling.k8s.io", "podgroups", ("list",), "read the minimum of each PodGroup (Workload API)"),
    Rule(
        records.GROUP,
        records.PLURAL,
        ("list", "create", "patch", "delete"),
        "publish what each claim holds (kubectl get gpuallocations)",
    ),
)


def checks(dra: bool) -> list[tuple[Rule, str]]:
    """Every (rule, verb) pair to ask the API server about."""
    return [(rule, verb) for rule in RULES if dra or not rule.needs_dra for verb in rule.verbs]


def missing(api: client.ApiClient, dra: bool) -> list[tuple[Rule, str]]:
    """The (rule, verb) pairs the token may not use, asked one SelfSubjectAccessReview each (a
    ProviderError when the server does not answer)."""
    authz = client.AuthorizationV1Api(api)
    refused = []
    for rule, verb in checks(dra):
        resource, _, subresource = rule.resource.partition("/")
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    group=rule.group, resource=resource, subresource=subresource or None, verb=verb
                )
            )
        )
        if not call(authz.create_self_subject_access_review, review).status.allowed:
            refused.append((rule, verb))
    return refused


def refusal(refused: list[tuple[Rule, str]]) -> str:
    """What attach says about a token that may not do all NVKE needs: each missing verb and rule, and what
    to apply. On a cluster that once worked this is a ClusterRole older than this NVKE's."""
    named = ", ".join(
        f"{verb} {rule.resource}{f'.{rule.group}' if rule.group else ''} ({rule.why})"
        for rule, verb in refused
    )
    return (
        f"The token may not {named}. The ClusterRole {ACCOUNT!r} on the cluster is missing rules this NVKE "
        "needs (older than NVKE's, or not applied): apply NVKE's current RBAC manifest with kubectl apply -f "
        "(GET /api/v1/clusters/rbac-manifest/, or the attach page) and attach with its service account's "
        "token."
    )


def manifest() -> str:
    """The YAML an admin applies (`kubectl apply -f`) to give NVKE its service account, a least-privilege
    ClusterRole and a long-lived token Secret; attach then takes that token."""
    rules: dict[str, dict[str, list[str]]] = {}
    for rule in RULES:
        rules.setdefault(rule.group, {})[rule.resource] = list(rule.verbs)
    documents = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": ACCOUNT, "namespace": NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": ACCOUNT},
            "rules": [
                {"apiGroups": [group], "resources": [resource], "verbs": verbs}
                for group, resources in rules.items()
                for resource, verbs in resources.items()
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": ACCOUNT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
        },
        records.crd(),
        records.viewer_role(),
        *admission.objects(),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": f"{ACCOUNT}-token",
                "namespace": NAMESPACE,
                "annotations": {"kubernetes.io/service-account.name": ACCOUNT},
            },
        },
    ]
    header = (
        "# NVKE's access to this cluster. Apply it, then attach the cluster with the token:\n"
        f"#   kubectl -n {NAMESPACE} get secret {ACCOUNT}-token -o jsonpath='{{.data.token}}' | base64 -d\n"
        "# Before Kubernetes 1.36 kubectl reports the two MutatingAdmissionPolicy objects as not served;\n"
        "# everything else applies, and NVKE's ValidatingAdmissionPolicy holds GPU pods there.\n"
    )
    # One List document rather than a stream: kubectl applies it the same, and it is one YAML value.
    listed = {"apiVersion": "v1", "kind": "List", "items": documents}
    return header + yaml.dump(listed, Dumper=_Plain, sort_keys=False)


class _Plain(yaml.SafeDumper):
    """Writes a value used twice twice: an admin reads the manifest, and &id001/*id001 anchors for the
    repeated verb lists say nothing to a reader."""

    def ignore_aliases(self, data) -> bool:
        return True
