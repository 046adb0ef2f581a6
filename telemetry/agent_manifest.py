"""The nvke-agent install for an attached cluster, as one manifest a tenant applies with `kubectl apply`:
a Secret with a fresh node token per NVKE node (issuing one replaces that node's old token) and a
DaemonSet on every node of an NVKE pool that runs the agent with its node's token. The agent sees every
GPU through the GPU Operator's `nvidia` runtime (as dcgm-exporter does) and posts to NVKE's URL."""

from django.conf import settings
from django.db import transaction

from clusters.models import Cluster
from nodepools.models import Node
from nvke.providers.kubernetes.gpus import POOL_LABEL
from nvke.providers.kubernetes.rbac import NAMESPACE

from .models import NodeToken

NAME = "nvke-agent"


def agent_manifest(cluster: Cluster, base_url: str) -> dict:
    """Issue tokens for the cluster's nodes and return the manifest (a v1 List) that installs the agent."""
    with transaction.atomic():
        tokens = {node.name: NodeToken.issue(node)[1] for node in Node.objects.filter(pool__cluster=cluster)}
    return {"apiVersion": "v1", "kind": "List", "items": [_secret(tokens), _daemonset(base_url.rstrip("/"))]}


def _secret(tokens: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": f"{NAME}-tokens", "namespace": NAMESPACE},
        "stringData": tokens,  # one key per node name: the DaemonSet's pod reads its own
    }


def _daemonset(base_url: str) -> dict:
    labels = {"app.kubernetes.io/name": NAME}
    container = {
        "name": NAME,
        "image": settings.NVKE_AGENT_IMAGE,
        "command": ["sh", "-c", 'NVKE_NODE_TOKEN="$(cat /etc/nvke/tokens/$NODE_NAME)" exec nvke-agent'],
        "env": [
            {"name": "NVKE_URL", "value": base_url},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        ],
        "volumeMounts": [{"name": "tokens", "mountPath": "/etc/nvke/tokens", "readOnly": True}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "runtimeClassName": "nvidia",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}]}
                                ]
                            }
                        }
                    },
                    # NVKE's pool taint keeps other pods off its nodes; the agent belongs there.
                    "tolerations": [{"key": POOL_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [container],
                    "volumes": [{"name": "tokens", "secret": {"secretName": f"{NAME}-tokens"}}],
                },
            },
        },
    }
