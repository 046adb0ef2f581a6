"""The pod a claim's page offers: a ResourceClaim reference where DRA is served, the same request for
NVKE's scheduler where it is not. Each template is a Pod the official schemas accept."""

import pytest
import yaml

from claims.models import Claim
from claims.pod_templates import pod_template
from tests.kubeapi.validation import validate_builtin

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(owner, make_cluster):
    return make_cluster(owner.memberships.get().tenant, "prod")


def claim_on(cluster, **fields):
    return Claim(tenant=cluster.tenant, cluster=cluster, namespace="ml", name="train", **fields)


def test_where_dra_is_served_the_pod_references_the_claims_resource_claim(cluster):
    pod = yaml.safe_load(pod_template(claim_on(cluster, kind="whole", gpus=2)))
    validate_builtin(pod, 34)
    assert pod["metadata"] == {"name": "train-worker", "namespace": "ml"}
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "train"}]
    assert pod["spec"]["schedulingGates"] == [{"name": "nvke.io/placement"}]
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}


@pytest.mark.parametrize(
    ("fields", "limits"),
    [
        ({"kind": "whole", "gpus": 2}, {"nvidia.com/gpu": "2"}),
        ({"kind": "mig", "mig_profile": "1g.10gb"}, {"nvidia.com/mig-1g.10gb": "1"}),
        (
            {"kind": "fraction", "gpu_memory_mib": 8192, "compute_percent": 70},
            {"nvidia.com/gpu-memory": "8Gi", "nvidia.com/gpu-utilization": "70", "nvke.io/gpu-share": "1"},
        ),
    ],
)
def test_without_dra_the_pod_asks_nvkes_scheduler_for_the_same(cluster, fields, limits):
    cluster.attached = True
    cluster.observed = {"features": {"dra": False}}
    pod = yaml.safe_load(pod_template(claim_on(cluster, **fields)))
    validate_builtin(pod, 33)
    assert pod["spec"]["schedulerName"] == "nvke"
    assert pod["spec"]["containers"][0]["resources"] == {"limits": limits}


@pytest.mark.parametrize("dra", [True, False])
@pytest.mark.parametrize(
    "fields",
    [{"kind": "whole", "gpus": 2}, {"kind": "fraction", "gpu_memory_mib": 8192, "compute_percent": 70}],
)
def test_the_template_passes_nvkes_admission_where_nothing_mutates_it(cluster, fields, dra):
    """On 1.34 NVKE's ValidatingAdmissionPolicy alone guards managed namespaces: a template that lacked
    the gate, the pool taint's toleration, the scheduler or the device plugin's slot would be refused as
    the user applies it."""
    import kubernetes

    from tests.conftest import install_nvke_policies
    from tests.kubeapi.fixtures import client_configuration
    from tests.kubeapi.objects import namespace
    from tests.kubeapi.server import FakeKubeApi

    cluster.attached = not dra
    cluster.observed = {"features": {"dra": dra}}
    pod = yaml.safe_load(pod_template(claim_on(cluster, **fields)))
    with FakeKubeApi(version="1.34.2") as server:
        install_nvke_policies(server)
        server.create(namespace("ml", {"nvke.io/managed": "true"}))
        with kubernetes.client.ApiClient(client_configuration(server)) as api:
            kubernetes.client.CoreV1Api(api).create_namespaced_pod("ml", pod)
        assert server.get("v1", "Pod", "train-worker", "ml")["spec"]["tolerations"] == [
            {"key": "nvke.io/pool", "operator": "Exists", "effect": "NoSchedule"}
        ]
