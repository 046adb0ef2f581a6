"""A management cluster (the fake API server with Cluster API's CRDs and simulated controllers), the
workload cluster its first cluster becomes, and the admin's setting naming the management cluster."""

import pytest

from nvke.providers.clusterapi.models import ManagementCluster
from tests.kubeapi import capi
from tests.kubeapi.capi_actors import ClusterAPI, kubeconfig
from tests.kubeapi.server import FakeKubeApi

NS = "nvke"
H100 = {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}


@pytest.fixture
def management(request, kubeapi):
    """The management cluster with an H100 machine template for the catalog's h100-sxm5-80gb, and
    Cluster API's add-on provider for Helm unless parametrized (indirect) False."""
    capi.install(kubeapi, NS, helm=getattr(request, "param", True))
    kubeapi.create(
        capi.machine_template("gpu-h100", gpu=H100, labels={"nvke.io/gpu-model": "h100-sxm5-80gb"})
    )
    kubeapi.clear_requests()
    return kubeapi


@pytest.fixture
def cluster_api(management):
    """Cluster API's simulated controllers: `workloads[name] = server` brings cluster `name` up."""
    return ClusterAPI(management, NS)


@pytest.fixture
def workload():
    with FakeKubeApi(token="workload-admin") as server:
        yield server


@pytest.fixture
def capi_setting(db, management):
    return ManagementCluster.objects.create(
        kubeconfig=kubeconfig(management, "management"),
        namespace=NS,
        infrastructure_api_version=f"{capi.INFRA}/{capi.VERSION}",
        cluster_template="FakeClusterTemplate/gpu-cloud",
        control_plane_machine_template="FakeMachineTemplate/control-plane",
        kubernetes_versions={"1.34": "v1.34.2", "1.35": "v1.35.1"},
    )
