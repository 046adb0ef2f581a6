"""The kubeconfig a tenant downloads for a cluster: its API endpoint as a cluster entry, a user entry and
a context joining them, named after the cluster.

The control plane records only the endpoint the provider returned at provisioning; it holds no
certificate authority or credentials for the tenant's cluster yet, so the user entry is empty and
the file says how to add credentials (`kubectl config set-credentials`)."""

import yaml

from clusters.models import Cluster

HEADER = """\
# kubeconfig for NVKE cluster {name} ({region}), Kubernetes {version}.
# NVKE records no credentials for this cluster yet: add yours to user {user!r}, e.g.
#   kubectl --kubeconfig {filename} config set-credentials {user} --token=<token>
"""


def kubeconfig_filename(cluster: Cluster) -> str:
    return f"{cluster.name}-kubeconfig.yaml"


def kubeconfig_yaml(cluster: Cluster, username: str) -> str:
    """A kubeconfig (YAML) for a cluster that has an endpoint."""
    name = f"nvke-{cluster.tenant.slug}-{cluster.name}"
    user = f"{name}-{username}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": cluster.endpoint}}],
        "users": [{"name": user, "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
        "current-context": name,
        "preferences": {},
    }
    header = HEADER.format(
        name=cluster.name,
        region=cluster.region.name,
        version=cluster.kubernetes_version.version,
        user=user,
        filename=kubeconfig_filename(cluster),
    )
    return header + yaml.safe_dump(config, sort_keys=False)
