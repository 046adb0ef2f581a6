"""The admission policies NVKE needs on an attached cluster, so that a GPU pod in a namespace it manages
waits for it from creation: a pod with ResourceClaims gets NVKE's scheduling gate and the pool taint's
toleration; a pod asking `nvidia.com/gpu-memory` / `nvidia.com/gpu-utilization` gets `schedulerName: nvke`,
the toleration and, on the container that asks, one slot of NVKE's device plugin (`nvke.io/gpu-share: 1`
in its limits: without it the kubelet calls no Allocate, and the container starts with no GPU limit).
Scheduling gates can only be added when a pod is created (kubernetes/kubernetes
pkg/apis/core/validation/validation.go, ValidatePodUpdate: gates may be removed, never added), so a
mutating webhook or policy is the only way to hold a pod NVKE did not write.

Which admission APIs a minor serves by default (kubernetes/api admissionregistration/*/types.go
`prerelease-lifecycle-gen:introduced`; kubernetes/kubernetes pkg/features/versioned_kube_features.go
`MutatingAdmissionPolicy`): ValidatingAdmissionPolicy v1 from 1.30; MutatingAdmissionPolicy v1beta1 in
1.34–1.35 behind a beta gate that is off by default (and beta APIs are off by default), v1 (GA, on)
from 1.36. So from 1.36 NVKE mutates and validates; on 1.34–1.35 it only validates, and a pod that
lacks the gate or the toleration is refused with a message that says what to add (the floor).

The policies are CEL over the pod alone: admission cannot read the ResourceClaims a pod names, so every
claim-using pod in a managed namespace is gated, whatever driver its claims name; NVKE's workloads pass
lifts the gate of one whose claims ask no NVIDIA DeviceClass (workloads.py _lift_gates).
Attach compares what it finds on the cluster with these objects (`check`)."""

import hashlib
import json

from kubernetes import client

from nvke.agent import allocation
from nvke.providers.base import ProviderError

from . import dra, gpus
from .account import USERNAME
from .client import read, said

API_VERSION = "admissionregistration.k8s.io/v1"
MUTATING_VERSION = (1, 36)  # MutatingAdmissionPolicy v1 served and on by default from here
NAME = "nvke-gpu-pods"  # the policies' and their bindings' name
DIGEST = "nvke.io/spec-digest"
SCHEDULER = "nvke"
SHARED_RESOURCES = ("nvidia.com/gpu-memory", "nvidia.com/gpu-utilization")
# The pool taint NVKE puts on its GPU nodes (operations.py); until dra.py owns the shape, here.
TOLERATION = dra.POOL_TOLERATION  # the toleration admitted_pod_fields() gives a GPU pod
SERVICE_ACCOUNT = USERNAME
SLOT = allocation.RESOURCE  # the device plugin's share slot: one per container that asks for a share
# CEL has no list index without the two-variable comprehensions (1.33+), which cel-python lacks: the
# mutation looks for the container that asks among the first MAX_CONTAINERS; one further down is refused
# by the validation, which says what to add.
MAX_CONTAINERS = 16


def _asks(field: str, c: str = "c") -> str:
    keys = " || ".join(f'"{name}" in {c}.resources.{field}' for name in SHARED_RESOURCES)
    return f"(has({c}.resources.{field}) && ({keys}))"


def _asking(c: str) -> str:
    """CEL: container `c` asks for a share of a GPU."""
    return f"(has({c}.resources) && ({_asks('limits', c)} || {_asks('requests', c)}))"


# CEL shared by both policies; a pod's fields that are empty are absent from the object, hence has().
VARIABLES = [
    {
        "name": "claims",
        "expression": "has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0",
    },
    {
        "name": "shared",
        "expression": f"object.spec.containers.exists(c, {_asking('c')})",
    },
    {
        # The indexes of the containers that ask for a share (among the first MAX_CONTAINERS).
        "name": "sharing",
        "expression": f"{list(range(MAX_CONTAINERS))}.filter(i, i < size(object.spec.containers) && "
        f"{_asking('object.spec.containers[i]')})",
    },
    {
        "name": "slotted",
        "expression": f"object.spec.containers.exists(c, {_asking('c')} && has(c.resources.limits) && "
        f'"{SLOT}" in c.resources.limits)',
    },
    {
        "name": "gated",
        "expression": "has(object.spec.schedulingGates) && "
        f'object.spec.schedulingGates.exists(g, g.name == "{dra.GATE}")',
    },
    {
        # An empty key with Exists tolerates every taint; otherwise NVKE's key, any value.
        "name": "tolerates",
        "expression": "has(object.spec.tolerations) && object.spec.tolerations.exists(t, "
        'has(t.operator) && t.operator == "Exists" && '
        f'(!has(t.key) || t.key == "" || t.key == "{gpus.POOL_LABEL}") && '
        f'(!has(t.effect) || t.effect == "" || t.effect == "{TOLERATION["effect"]}"))',
    },
    {
        "name": "ours",
        "expression": f'has(object.spec.schedulerName) && object.spec.schedulerName == "{SCHEDULER}"',
    },
]

MATCH = {
    "namespaceSelector": {"matchExpressions": [{"key": dra.MANAGED, "operator": "Exists"}]},
    "resourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
    ],
}


def _append(field: str, value: str) -> str:
    """A JSONPatch list that appends `value` to the pod's list `field`, making the list if absent."""
    return (
        f"has(object.spec.{field}) ? "
        f'[JSONPatch{{op: "add", path: "/spec/{field}/-", value: {value}}}] : '
        f'[JSONPatch{{op: "add", path: "/spec/{field}", value: [{value}]}}]'
    )


GATE_VALUE = f'Object.spec.schedulingGates{{name: "{dra.GATE}"}}'
SLOT_PATH = "/spec/containers/' + string(variables.sharing[0]) + '/resources/limits"
SLOT_PATCH = (
    "has(object.spec.containers[variables.sharing[0]].resources.limits) ? "
    f'[JSONPatch{{op: "add", path: \'{SLOT_PATH}/{SLOT.replace("/", "~1")}\', value: "1"}}] : '
    f'[JSONPatch{{op: "add", path: \'{SLOT_PATH}\', value: {{"{SLOT}": "1"}}}}]'
)
TOLERATION_VALUE = "Object.spec.tolerations{" + ", ".join(f'{k}: "{v}"' for k, v in TOLERATION.items()) + "}"

MUTATIONS = [
    {"expression": f"variables.claims && !variables.gated ? ({_append('schedulingGates', GATE_VALUE)}) : []"},
    {
        "expression": "(variables.claims || variables.shared) && !variables.tolerates ? "
        f"({_append('tolerations', TOLERATION_VALUE)}) : []"
    },
    {
        "expression": "variables.shared && !variables.ours ? "
        f'[JSONPatch{{op: "add", path: "/spec/schedulerName", value: "{SCHEDULER}"}}] : []'
    },
    {"expression": f"size(variables.sharing) > 0 && !variables.slotted ? ({SLOT_PATCH}) : []"},
]

TOLERATION_TEXT = "{" + ", ".join(f"{k}: {v}" for k, v in TOLERATION.items()) + "}"
VALIDATIONS = [
    {
        "expression": 'request.operation != "CREATE" || !variables.claims || variables.gated',
        "message": f"a pod with ResourceClaims in a namespace NVKE manages waits for NVKE to allocate them: "
        f"add spec.schedulingGates [{{name: {dra.GATE}}}] (NVKE's MutatingAdmissionPolicy adds it on "
        f"Kubernetes {'.'.join(map(str, MUTATING_VERSION))}+)",
    },
    {
        "expression": 'request.operation != "CREATE" || !(variables.claims || variables.shared) || '
        "variables.tolerates",
        "message": f"NVKE's GPU nodes carry the taint {gpus.POOL_LABEL}:NoSchedule: add spec.tolerations "
        f"[{TOLERATION_TEXT}]",
    },
    {
        "expression": 'request.operation != "CREATE" || !variables.shared || variables.ours',
        "message": f"{' and '.join(SHARED_RESOURCES)} are placed by NVKE's scheduler: set "
        f"spec.schedulerName: {SCHEDULER}",
    },
    {
        "expression": 'request.operation != "CREATE" || !variables.shared || variables.slotted',
        "message": f"a GPU share reaches its container through NVKE's device plugin: add {SLOT}: 1 to the "
        f"resources.limits of the container that asks for {' or '.join(SHARED_RESOURCES)}",
    },
    {
        "expression": 'request.operation != "UPDATE" || variables.gated || '
        "!(has(oldObject.spec.schedulingGates) && "
        f'oldObject.spec.schedulingGates.exists(g, g.name == "{dra.GATE}")) || '
        f'request.userInfo.username == "{SERVICE_ACCOUNT}"',
        "message": f"only NVKE removes the scheduling gate {dra.GATE}, once it has allocated the pod's GPU "
        "claims: keep it in spec.schedulingGates",
    },
]


def _stamped(kind: str, spec: dict) -> dict:
    """One of NVKE's objects, its spec's digest in an annotation: attach compares digests, not specs,
    because the server fills in defaults (matchPolicy, selectors, scope) that would make every spec
    differ from the one sent."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {
            "name": NAME,
            "labels": {"app.kubernetes.io/managed-by": "nvke"},
            "annotations": {DIGEST: digest},
        },
        "spec": spec,
    }


def validating() -> list[dict]:
    """The ValidatingAdmissionPolicy and its binding (Deny): the floor on every minor NVKE drives."""
    policy = {
        "failurePolicy": "Fail",
        "matchConstraints": MATCH,
        "variables": VARIABLES,
        "validations": VALIDATIONS,
    }
    return [
        _stamped("ValidatingAdmissionPolicy", policy),
        _stamped("ValidatingAdmissionPolicyBinding", {"policyName": NAME, "validationActions": ["Deny"]}),
    ]


def mutating() -> list[dict]:
    """The MutatingAdmissionPolicy (JSONPatch, on CREATE) and its binding, for 1.36+."""
    create_only = {**MATCH, "resourceRules": [{**MATCH["resourceRules"][0], "operations": ["CREATE"]}]}
    policy = {
        "failurePolicy": "Fail",
        "matchConstraints": create_only,
        "variables": VARIABLES,
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": m} for m in MUTATIONS],
        "reinvocationPolicy": "IfNeeded",  # run again when a later mutator adds claims or resources
    }
    return [
        _stamped("MutatingAdmissionPolicy", policy),
        _stamped("MutatingAdmissionPolicyBinding", {"policyName": NAME}),
    ]


def objects(minor: tuple[int, int] | None = None) -> list[dict]:
    """What the admin applies with NVKE's RBAC manifest: both policies where the minor serves them, the
    validating one alone before; None gives all four (a manifest for any minor: kubectl refuses the
    mutating two where they are not served, and says so)."""
    if minor is not None and minor < MUTATING_VERSION:
        return validating()
    return validating() + mutating()


def stale(found: dict[str, dict | None], minor: tuple[int, int]) -> list[str]:
    """NVKE's policies that the cluster lacks or holds in another version, as `Kind/name`. `found`: the
    object of NVKE's name of each kind as read from the cluster (None when absent)."""
    return [
        f"{wanted['kind']}/{NAME}"
        for wanted in objects(minor)
        if (have := found.get(wanted["kind"])) is None
        or (have["metadata"].get("annotations") or {}).get(DIGEST)
        != wanted["metadata"]["annotations"][DIGEST]
    ]


def read_policies(api: client.ApiClient, minor: tuple[int, int]) -> dict[str, dict | None]:
    """NVKE's policy objects as the cluster holds them, by kind (None where absent). ProviderError when
    the cluster will not say."""
    registration = client.AdmissionregistrationV1Api(api)
    readers = {
        "ValidatingAdmissionPolicy": registration.read_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": registration.read_validating_admission_policy_binding,
        "MutatingAdmissionPolicy": registration.read_mutating_admission_policy,
        "MutatingAdmissionPolicyBinding": registration.read_mutating_admission_policy_binding,
    }
    found: dict[str, dict | None] = {}
    for wanted in objects(minor):
        try:
            found[wanted["kind"]] = read(readers[wanted["kind"]], NAME)
        except ProviderError as error:
            if error.status != 404:
                raise
            found[wanted["kind"]] = None
    return found


def check(api: client.ApiClient, minor: tuple[int, int]) -> list[tuple[str, str, str]]:
    """Attach's check that NVKE's policies are on the cluster as NVKE would write them, as (check,
    reason, message) triples naming what to apply."""
    try:
        kinds = stale(read_policies(api, minor), minor)
    except ProviderError as error:
        return [("admission", error.reason, said(error))]
    if not kinds:
        return []
    message = (
        f"NVKE's admission policies are missing or out of date ({', '.join(kinds)}): without them a GPU pod "
        "can start before NVKE places it. Apply NVKE's manifest (GET /api/v1/clusters/rbac-manifest/)."
    )
    return [("admission", "AdmissionPoliciesMissing", message)]
