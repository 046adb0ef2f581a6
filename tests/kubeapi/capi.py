"""Cluster API's CRDs for the fake API server, trimmed: the v1beta2 kinds NVKE writes and reads.

Source: kubernetes-sigs/cluster-api, `api/core/v1beta2` (Cluster, MachineDeployment, Machine,
MachineHealthCheck), `api/controlplane/kubeadm/v1beta2` (KubeadmControlPlane) and
`api/bootstrap/kubeadm/v1beta2` (KubeadmConfigTemplate), as served by Cluster API v1.11–v1.15 (v1beta2 is
the storage version since v1.11; v1beta1 is deprecated and is to stop being served in v1.16). Each field
NVKE or the simulated controllers write is declared with the type, bounds and required-ness of the CRD's
openAPIV3Schema; fields nobody here writes are declared open (`x-kubernetes-preserve-unknown-fields`) or
left out, so an undeclared field is an error as with fieldValidation=Strict.

Cluster API's add-on provider for Helm (CAAPH: kubernetes-sigs/cluster-api-addon-provider-helm,
`api/v1alpha1`, as served beside Cluster API v1beta2): HelmChartProxy and HelmReleaseProxy, installed
unless `install(..., helm=False)`.

The infrastructure provider is a stand-in (`infrastructure.fake.nvke.io`): NVKE only copies an operator's
cluster template and references machine templates by name, so their specs stay open. Its machine
templates carry `spec.template.spec.gpu` ({product, count}), which the simulated machines boot with."""

from __future__ import annotations

from typing import Any

CORE, CONTROL_PLANE, BOOTSTRAP = (
    "cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
)
INFRA = "infrastructure.fake.nvke.io"
VERSION = "v1beta2"
ADDONS, ADDONS_VERSION = "addons.cluster.x-k8s.io", "v1alpha1"

_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_OPEN_LIST = {"type": "array", "items": _OPEN}
_STRING = {"type": "string"}
_STRINGS = {"type": "array", "items": _STRING}
_STRING_MAP = {"type": "object", "additionalProperties": _STRING}
_INT32 = {"type": "integer", "format": "int32"}
_SECONDS = {"type": "integer", "format": "int32", "minimum": 0}
_BOOL = {"type": "boolean"}
_INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


# ContractVersionedObjectReference: the version comes from the referenced CRD's contract label.
_REF = _object(
    {
        "apiGroup": {"type": "string", "minLength": 1, "maxLength": 253},
        "kind": {
            "type": "string",
            "minLength": 1,
            "maxLength": 63,
            "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$",
        },
        "name": _NAME,
    },
    ("apiGroup", "kind", "name"),
)
_META = _object({"labels": _STRING_MAP, "annotations": _STRING_MAP})  # clusterv1.ObjectMeta
_SELECTOR = _object(
    {
        "matchLabels": _STRING_MAP,
        "matchExpressions": {
            "type": "array",
            "items": _object({"key": _STRING, "operator": _STRING, "values": _STRINGS}, ("key", "operator")),
        },
    }
)
_CONDITIONS = {  # metav1.Condition
    "type": "array",
    "maxItems": 32,
    "items": _object(
        {
            "type": {"type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "reason": {"type": "string", "minLength": 1, "maxLength": 1024},
            "message": {"type": "string", "maxLength": 32768},
        },
        ("lastTransitionTime", "message", "reason", "status", "type"),
    ),
}
_REPLICAS = {name: _INT32 for name in ("replicas", "readyReplicas", "availableReplicas", "upToDateReplicas")}
_DELETION = _object(
    {
        "nodeDrainTimeoutSeconds": _SECONDS,
        "nodeVolumeDetachTimeoutSeconds": _SECONDS,
        "nodeDeletionTimeoutSeconds": _SECONDS,
    }
)
_MACHINE_SPEC = _object(
    {
        "clusterName": {"type": "string", "minLength": 1, "maxLength": 63},
        "bootstrap": _object({"configRef": _REF, "dataSecretName": {"type": "string", "maxLength": 253}}),
        "infrastructureRef": _REF,
        "version": {"type": "string", "minLength": 1, "maxLength": 256},
        "providerID": {"type": "string", "minLength": 1, "maxLength": 512},
        "failureDomain": {"type": "string", "minLength": 1, "maxLength": 256},
        "minReadySeconds": _SECONDS,
        "readinessGates": _OPEN_LIST,
        "deletion": _DELETION,
        "taints": _OPEN_LIST,
    },
    ("clusterName", "bootstrap", "infrastructureRef"),
)
_NODE_REGISTRATION = _object(
    {
        "name": _STRING,
        "criSocket": _STRING,
        "taints": {
            "type": "array",
            "maxItems": 100,
            "items": _object(
                {
                    "key": _STRING,
                    "value": _STRING,
                    "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                    "timeAdded": {"type": "string", "format": "date-time"},
                },
                ("effect", "key"),
            ),
        },
        "kubeletExtraArgs": {
            "type": "array",
            "minItems": 1,
            "maxItems": 100,
            "items": _object(
                {
                    "name": {"type": "string", "minLength": 1, "maxLength": 256},
                    "value": {"type": "string", "maxLength": 1024},
                },
                ("name", "value"),
            ),
        },
        "ignorePreflightErrors": _STRINGS,
        "imagePullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
    }
)
_KUBEADM_CONFIG_SPEC = _object(
    {
        "clusterConfiguration": _OPEN,
        "initConfiguration": _object({"nodeRegistration": _NODE_REGISTRATION, "bootstrapTokens": _OPEN_LIST}),
        "joinConfiguration": _object({"nodeRegistration": _NODE_REGISTRATION, "discovery": _OPEN}),
        "files": _OPEN_LIST,
        "preKubeadmCommands": _STRINGS,
        "postKubeadmCommands": _STRINGS,
        "users": _OPEN_LIST,
        "format": {"type": "string", "enum": ["cloud-config", "ignition"]},
    }
)

CLUSTER = _object(
    {
        "spec": _object(
            {
                "paused": _BOOL,
                "clusterNetwork": _object(
                    {
                        "apiServerPort": {
                            "type": "integer",
                            "format": "int32",
                            "minimum": 1,
                            "maximum": 65535,
                        },
                        "services": _object({"cidrBlocks": _STRINGS}, ("cidrBlocks",)),
                        "pods": _object({"cidrBlocks": _STRINGS}, ("cidrBlocks",)),
                        "serviceDomain": {"type": "string", "minLength": 1, "maxLength": 253},
                    }
                ),
                "controlPlaneEndpoint": _object(
                    {
                        "host": {"type": "string", "maxLength": 512},
                        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                    }
                ),
                "controlPlaneRef": _REF,
                "infrastructureRef": _REF,
                "topology": _OPEN,
                "availabilityGates": _OPEN_LIST,
            }
        ),
        "status": _object(
            {
                "conditions": _CONDITIONS,
                "initialization": _object(
                    {"infrastructureProvisioned": _BOOL, "controlPlaneInitialized": _BOOL}
                ),
                "controlPlane": _object({"desiredReplicas": _INT32, **_REPLICAS}),
                "workers": _object({"desiredReplicas": _INT32, **_REPLICAS}),
                "failureDomains": _OPEN_LIST,
                "phase": {
                    "type": "string",
                    "enum": ["Pending", "Provisioning", "Provisioned", "Deleting", "Failed", "Unknown"],
                },
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 1},
                "deprecated": _OPEN,
            }
        ),
    }
)

KUBEADM_CONTROL_PLANE = _object(
    {
        "spec": _object(
            {
                "replicas": _INT32,
                "version": {"type": "string", "minLength": 1, "maxLength": 256},
                "machineTemplate": _object(
                    {
                        "metadata": _META,
                        "spec": _object(
                            {"infrastructureRef": _REF, "readinessGates": _OPEN_LIST, "deletion": _DELETION},
                            ("infrastructureRef",),
                        ),
                    },
                    ("spec",),
                ),
                "kubeadmConfigSpec": _KUBEADM_CONFIG_SPEC,
                "rollout": _OPEN,
                "remediation": _OPEN,
                "machineNaming": _OPEN,
            },
            ("machineTemplate", "version"),
        ),
        "status": _object(
            {
                "conditions": _CONDITIONS,
                "initialization": _object({"controlPlaneInitialized": _BOOL}),
                **_REPLICAS,
                "selector": _STRING,
                "version": _STRING,
                "versions": _OPEN_LIST,
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 1},
                "deprecated": _OPEN,
            }
        ),
    }
)

KUBEADM_CONFIG_TEMPLATE = _object(
    {"spec": _object({"template": _object({"metadata": _META, "spec": _KUBEADM_CONFIG_SPEC})}, ("template",))}
)

MACHINE_DEPLOYMENT = _object(
    {
        "spec": _object(
            {
                "clusterName": {"type": "string", "minLength": 1, "maxLength": 63},
                "replicas": _INT32,
                "rollout": _object(
                    {
                        "after": {"type": "string", "format": "date-time"},
                        "strategy": _object(
                            {
                                "type": {"type": "string", "enum": ["RollingUpdate", "OnDelete"]},
                                "rollingUpdate": _object(
                                    {"maxUnavailable": _INT_OR_STRING, "maxSurge": _INT_OR_STRING}
                                ),
                            }
                        ),
                    }
                ),
                "selector": _SELECTOR,
                "template": _object({"metadata": _META, "spec": _MACHINE_SPEC}),
                "machineNaming": _OPEN,
                "remediation": _object({"maxInFlight": _INT_OR_STRING}),
                "deletion": _object({"order": {"type": "string", "enum": ["Random", "Newest", "Oldest"]}}),
                "paused": _BOOL,
            },
            ("clusterName", "selector", "template"),
        ),
        "status": _object(
            {
                "conditions": _CONDITIONS,
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 1},
                "selector": {"type": "string", "minLength": 1, "maxLength": 4096},
                **_REPLICAS,
                "versions": _OPEN_LIST,
                "phase": _STRING,
                "deprecated": _OPEN,
            }
        ),
    }
)

MACHINE = _object(
    {
        "spec": _MACHINE_SPEC,
        "status": _object(
            {
                "conditions": _CONDITIONS,
                "nodeRef": _object({"name": _NAME}, ("name",)),
                "initialization": _object(
                    {"infrastructureProvisioned": _BOOL, "bootstrapDataSecretCreated": _BOOL}
                ),
                "phase": _STRING,
                "addresses": _OPEN_LIST,
                "nodeInfo": _OPEN,
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 1},
                "deletion": _OPEN,
                "deprecated": _OPEN,
            }
        ),
    }
)

MACHINE_HEALTH_CHECK = _object(
    {
        "spec": _object(
            {
                "clusterName": {"type": "string", "minLength": 1, "maxLength": 63},
                "selector": _SELECTOR,
                "checks": _object(
                    {
                        "nodeStartupTimeoutSeconds": _SECONDS,
                        "unhealthyNodeConditions": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": 100,
                            "items": _object(
                                {
                                    "type": {"type": "string", "minLength": 1},
                                    "status": {"type": "string", "minLength": 1},
                                    "timeoutSeconds": _SECONDS,
                                },
                                ("type", "status", "timeoutSeconds"),
                            ),
                        },
                        "unhealthyMachineConditions": _OPEN_LIST,
                        "unhealthyExpressions": _OPEN_LIST,
                    }
                ),
                "remediation": _object(
                    {
                        "triggerIf": _object(
                            {
                                "unhealthyLessThanOrEqualTo": _INT_OR_STRING,
                                "unhealthyInRange": {
                                    "type": "string",
                                    "pattern": r"^\[[0-9]+-[0-9]+\]$",
                                    "minLength": 1,
                                    "maxLength": 32,
                                },
                            }
                        ),
                        "templateRef": _OPEN,
                    }
                ),
            },
            ("clusterName", "selector"),
        ),
        "status": _object(
            {
                "conditions": _CONDITIONS,
                "expectedMachines": {"type": "integer", "format": "int32", "minimum": 0},
                "currentHealthy": {"type": "integer", "format": "int32", "minimum": 0},
                "remediationsAllowed": {"type": "integer", "format": "int32", "minimum": 0},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 1},
                "targets": _STRINGS,
                "deprecated": _OPEN,
            }
        ),
    }
)

_HELM_OPTIONS = _object(
    {
        **{name: _BOOL for name in ("disableHooks", "wait", "waitForJobs", "dependencyUpdate", "skipCRDs")},
        **{name: _BOOL for name in ("disableOpenAPIValidation", "atomic", "enableClientCache")},
        "timeout": _STRING,  # a metav1.Duration
        "install": _object({"createNamespace": _BOOL, "includeCRDs": _BOOL}),
        "upgrade": _OPEN,
        "uninstall": _OPEN,
    }
)
_RELEASE_FIELDS = {
    "chartName": {"type": "string", "minLength": 1},
    "repoURL": {"type": "string", "minLength": 1},
    "releaseName": _STRING,
    "namespace": _STRING,
    "version": _STRING,
}
HELM_CHART_PROXY = _object(
    {
        "spec": _object(
            {
                "clusterSelector": _SELECTOR,
                **_RELEASE_FIELDS,
                "valuesTemplate": _STRING,
                "reconcileStrategy": {"type": "string", "enum": ["", "InstallOnce", "Continuous"]},
                "options": _HELM_OPTIONS,
                "credentials": _OPEN,
                "tlsConfig": _OPEN,
            },
            ("clusterSelector", "chartName", "repoURL"),
        ),
        "status": _object(
            {
                "conditions": _CONDITIONS,
                "matchingClusters": _OPEN_LIST,
                "observedGeneration": {"type": "integer", "format": "int64"},
            }
        ),
    }
)
HELM_RELEASE_PROXY = _object(
    {
        "spec": _object(
            {"clusterRef": _OPEN, **_RELEASE_FIELDS, "values": _STRING, "options": _HELM_OPTIONS},
            ("clusterRef", "chartName", "repoURL"),
        ),
        "status": _object(
            {
                "conditions": _CONDITIONS,
                "status": _STRING,  # Helm's release status: deployed, failed, pending-install, ...
                "revision": {"type": "integer"},
                "observedGeneration": {"type": "integer", "format": "int64"},
            }
        ),
    }
)

_INFRA_OPEN = _object({"spec": _OPEN, "status": _OPEN})


def crd(
    group: str,
    kind: str,
    schema: dict[str, Any],
    short_names: tuple[str, ...] = (),
    status: bool = True,
    served: str = VERSION,
    plural: str = "",
) -> dict:
    plural = plural or kind.lower() + ("es" if kind.endswith("s") else "s")
    version: dict[str, Any] = {
        "name": served,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # The contract label tells Cluster API which version of a referenced kind speaks its contract.
        "metadata": {"name": f"{plural}.{group}", "labels": {f"{CORE}/{VERSION}": VERSION}},
        "spec": {
            "group": group,
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
                "shortNames": list(short_names),
                "categories": ["cluster-api"],
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


CRDS = (
    crd(CORE, "Cluster", CLUSTER, ("cl",)),
    crd(CORE, "MachineDeployment", MACHINE_DEPLOYMENT, ("md",)),
    crd(CORE, "Machine", MACHINE, ("ma",)),
    crd(CORE, "MachineHealthCheck", MACHINE_HEALTH_CHECK, ("mhc", "mhcs")),
    crd(CONTROL_PLANE, "KubeadmControlPlane", KUBEADM_CONTROL_PLANE, ("kcp",)),
    crd(BOOTSTRAP, "KubeadmConfigTemplate", KUBEADM_CONFIG_TEMPLATE, status=False),
    crd(INFRA, "FakeCluster", _INFRA_OPEN),
    crd(INFRA, "FakeClusterTemplate", _INFRA_OPEN, status=False),
    crd(INFRA, "FakeMachineTemplate", _INFRA_OPEN, status=False),
)
HELM_CRDS = (
    crd(
        ADDONS, "HelmChartProxy", HELM_CHART_PROXY, ("hcp",), served=ADDONS_VERSION, plural="helmchartproxies"
    ),
    crd(
        ADDONS,
        "HelmReleaseProxy",
        HELM_RELEASE_PROXY,
        ("hrp",),
        served=ADDONS_VERSION,
        plural="helmreleaseproxies",
    ),
)


def install(server, namespace: str = "nvke", helm: bool = True) -> None:
    """Serve Cluster API's CRDs (with `helm`, CAAPH's too) on a FakeKubeApi (the management cluster) with
    a namespace for NVKE's objects, a cluster template and the control plane's machine template (see
    `machine_template`)."""
    for definition in CRDS + (HELM_CRDS if helm else ()):
        server.create(definition)
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    server.create(
        {
            "apiVersion": f"{INFRA}/{VERSION}",
            "kind": "FakeClusterTemplate",
            "metadata": {"name": "gpu-cloud", "namespace": namespace},
            "spec": {"template": {"spec": {"region": "eu-west-1", "network": "gpu-fabric"}}},
        }
    )
    server.create(machine_template("control-plane", namespace=namespace, gpu=None))


def machine_template(
    name: str, *, namespace: str = "nvke", gpu: dict[str, Any] | None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """An infrastructure machine template; `gpu` ({product, count}) is what its machines boot with."""
    spec: dict[str, Any] = {"flavor": name}
    if gpu:
        spec["gpu"] = gpu
    return {
        "apiVersion": f"{INFRA}/{VERSION}",
        "kind": "FakeMachineTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"template": {"spec": spec}},
    }
