"""A management cluster (the fake API server with Cluster API's CRDs and simulated controllers), the
workload cluster its first cluster becomes, and the admin's setting naming the management cluster."""

import pytest

from nvke.providers.base import PoolSpec
from nvke.providers.clusterapi.models import ManagementCluster
from tests.kubeapi import capi
from tests.kubeapi.capi_actors import ClusterAPI, kubeconfig
from tests.kubeapi.server import FakeKubeApi

NS = "nvke"
H100 = {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}


def pool_spec(name="train", **changes) -> PoolSpec:
    """An H100 pool of cluster c1, with `changes` over the defaults."""
    fields = dict(
        cluster="c1",
        region="eu-west-1",
        name=name,
        gpu_model="h100-sxm5-80gb",
        gpu_memory_mib=81559,
        gpus_per_node=8,
        nvlink=True,
        driver_version="570.133.20",
        cpu_millicores_per_node=208000,
        memory_mib_per_node=2064000,
        labels={"nvke.io/pool": name, "nvke.io/sharing-mode": "exclusive"},
        kubernetes_version="1.34",
        min_nodes=1,
        max_nodes=6,
    )
    return PoolSpec(**{**fields, **changes})


@pytest.fixture(params=["1.34.2", "1.36.0"], ids=lambda version: f"k8s{version.rpartition('.')[0]}")
def kube_version(request) -> str:
    """Every scenario runs with the management and workload clusters at each of these Kubernetes minors."""
    return request.param


@pytest.fixture
def management(request, kube_version):
    """The management cluster with an H100 machine template for the catalog's h100-sxm5-80gb, and
    Cluster API's add-on provider for Helm unless parametrized (indirect) False."""
    with FakeKubeApi(version=kube_version) as server:
        capi.install(server, NS, helm=getattr(request, "param", True))
        server.create(
            capi.machine_template("gpu-h100", gpu=H100, labels={"nvke.io/gpu-model": "h100-sxm5-80gb"})
        )
        server.clear_requests()
        yield server


@pytest.fixture
def cluster_api(management):
    """Cluster API's simulated controllers: `workloads[name] = server` brings cluster `name` up."""
    return ClusterAPI(management, NS)


@pytest.fixture
def workload(kube_version):
    with FakeKubeApi(version=kube_version, token="workload-admin") as server:
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
