"""What NVKE's service account may do on an attached cluster: one list of rules is both the ClusterRole
an admin applies and the SelfSubjectAccessReviews `attach` makes, so the two never drift apart."""

from dataclasses import dataclass

import yaml

from . import records

NAMESPACE = "nvke-system"
ACCOUNT = "nvke"


@dataclass(frozen=True)
class Rule:
    group: str
    resource: str  # "pods" or a subresource path such as "pods/eviction"
    verbs: tuple[str, ...]
    why: str
    needs_dra: bool = False  # checked only where the cluster serves resource.k8s.io/v1


RULES: tuple[Rule, ...] = (
    Rule("", "nodes", ("get", "list", "watch", "patch"), "read GPU nodes; label, taint and cordon them"),
    Rule(
        "",
        "pods",
        ("get", "list", "watch", "patch"),
        "find the pods a drain evicts and the driver pods; lift NVKE's scheduling gate",
    ),
    Rule("", "pods/eviction", ("create",), "drain nodes through the Eviction API"),
    Rule("", "pods/binding", ("create",), "bind the pods NVKE schedules (schedulerName: nvke)"),
    Rule(
        "",
        "namespaces",
        ("get", "list", "watch", "create", "patch"),
        "find (and follow) the namespaces NVKE manages and mark them its tenant's; make a claim's",
    ),
    Rule("", "events", ("create",), "record what NVKE did on the objects it touched"),
    Rule("policy", "poddisruptionbudgets", ("get", "list"), "say which budget holds a drain back"),
    Rule("nvidia.com", "clusterpolicies", ("get", "list"), "find the GPU Operator's configuration"),
    Rule(
        "nvidia.com",
        "nvidiadrivers",
        ("get", "list", "watch", "create", "patch"),
        "upgrade drivers through the GPU Operator",
    ),
    Rule("resource.k8s.io", "resourceslices", ("get", "list", "watch"), "read GPUs from DRA", True),
    Rule(
        "resource.k8s.io",
        "resourceclaims",
        ("get", "list", "watch", "create", "patch", "delete"),
        "make, adopt and release the claims of GPU workloads",
        True,
    ),
    Rule("resource.k8s.io", "resourceclaims/status", ("patch",), "write NVKE's allocations", True),
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
    Rule(
        records.GROUP,
        records.PLURAL,
        ("get", "list", "create", "patch", "delete"),
        "publish what each claim holds (kubectl get gpuallocations)",
    ),
)


def checks(dra: bool) -> list[tuple[Rule, str]]:
    """Every (rule, verb) pair to ask the API server about."""
    return [(rule, verb) for rule in RULES if dra or not rule.needs_dra for verb in rule.verbs]


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
    )
    # One List document rather than a stream: kubectl applies it the same, and it is one YAML value.
    return header + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": documents}, sort_keys=False)
