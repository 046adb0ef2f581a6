"""The nvke-agent install for an attached cluster, as one manifest a tenant applies with `kubectl apply`:
a Secret with a fresh node token per NVKE node (issuing one replaces that node's old token), the agent's
service account with the one permission its device plugin needs, and a DaemonSet on every node of an
NVKE pool that runs the agent with its node's token. The agent sees every GPU through the GPU Operator's
`nvidia` runtime (as dcgm-exporter does) and posts to NVKE's URL.

Every agent serves NVKE's device plugin (`--device-plugin`: the `nvke.io/gpu-share` slots through which a
scheduler-path pod gets its GPU and limits). A pool's sharing mode reaches its nodes as the label NVKE
puts on each node it adopts (`nvke.io/sharing-mode`, nodepools/services.py pool_spec): nodes labelled
`mps` get a second DaemonSet whose agent also runs the MPS control daemons (`--mps`), the others the
first; a pool's nodes move between them when NVKE relabels them, with no new manifest."""

from django.conf import settings
from django.db import transaction

from catalog.models import SharingMode
from clusters.models import Cluster
from nodepools.models import Node
from nvke.agent import kubelet, mps
from nvke.providers.kubernetes.gpus import POOL_LABEL
from nvke.providers.kubernetes.infrastructure import SHARING_LABEL
from nvke.providers.kubernetes.rbac import NAMESPACE

from .models import NodeToken

NAME = "nvke-agent"
RBAC = "rbac.authorization.k8s.io/v1"
# What the device plugin reads (nvke/agent/node_side.py node_pods): the pods bound to its node, listed
# across namespaces with the field selector spec.nodeName. RBAC cannot narrow a grant to a field
# selector, so this is list on pods; the agent asks for its own node's only.
RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]


def agent_manifest(cluster: Cluster, base_url: str) -> dict:
    """Issue tokens for the cluster's nodes and return the manifest (a v1 List) that installs the agent."""
    with transaction.atomic():
        tokens = {node.name: NodeToken.issue(node)[1] for node in Node.objects.filter(pool__cluster=cluster)}
    base_url = base_url.rstrip("/")
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            _secret(tokens),
            *_account(),
            _daemonset(base_url, mps_nodes=False),
            _daemonset(base_url, mps_nodes=True),
        ],
    }


def _secret(tokens: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": f"{NAME}-tokens", "namespace": NAMESPACE},
        "stringData": tokens,  # one key per node name: the DaemonSet's pod reads its own
    }


def _account() -> list[dict]:
    """The agent's ServiceAccount, a ClusterRole of RULES and the binding between them."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": NAME}, "rules": RULES},
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
    ]


def _host_path(name: str, path: str, kind: str) -> tuple[dict, dict]:
    """A host directory mounted at the same path in the agent (a volume and its mount)."""
    return {"name": name, "hostPath": {"path": path, "type": kind}}, {"name": name, "mountPath": path}


def _daemonset(base_url: str, mps_nodes: bool) -> dict:
    """The agent on the NVKE nodes labelled an MPS pool's (mps_nodes) or on all other NVKE nodes."""
    name = f"{NAME}-mps" if mps_nodes else NAME
    labels = {"app.kubernetes.io/name": name}
    flags = "--device-plugin --mps" if mps_nodes else "--device-plugin"
    plugins, plugins_mount = _host_path("device-plugins", kubelet.DEVICE_PLUGIN_PATH.rstrip("/"), "Directory")
    volumes = [{"name": "tokens", "secret": {"secretName": f"{NAME}-tokens"}}, plugins]
    mounts = [{"name": "tokens", "mountPath": "/etc/nvke/tokens", "readOnly": True}, plugins_mount]
    if mps_nodes:  # the pipe directories the device plugin's Allocate mounts into a pod, at the same path
        pipes, pipes_mount = _host_path("mps", mps.ROOT, "DirectoryOrCreate")
        # and the daemons' /dev/shm, which Allocate mounts as the pod's (mps.SHM says why)
        shm = {"name": "mps-shm", "hostPath": {"path": mps.SHM, "type": "DirectoryOrCreate"}}
        volumes += [pipes, shm]
        mounts += [pipes_mount, {"name": "mps-shm", "mountPath": mps.SHM_MOUNT}]
    container = {
        "name": NAME,
        "image": settings.NVKE_AGENT_IMAGE,
        "command": [
            "sh",
            "-c",
            f'NVKE_NODE_TOKEN="$(cat /etc/nvke/tokens/$NODE_NAME)" exec nvke-agent {flags}',
        ],
        "env": [
            {"name": "NVKE_URL", "value": base_url},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            # compute: the runtime then puts nvidia-cuda-mps-control in the container too
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        ],
        "volumeMounts": mounts,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        # root: the kubelet's device-plugins directory is root's, mode 0750 (devicemanager server.go)
        "securityContext": {
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
        },
    }
    mode = {
        "key": SHARING_LABEL,
        "operator": "In" if mps_nodes else "NotIn",
        "values": [SharingMode.MPS.value],
    }
    spec = {
        "serviceAccountName": NAME,
        "runtimeClassName": "nvidia",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}, mode]}
                    ]
                }
            }
        },
        # NVKE's pool taint keeps other pods off its nodes; the agent belongs there.
        "tolerations": [{"key": POOL_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": volumes,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
