"""Every object NVKE sends to a management cluster is accepted by Cluster API's and CAAPH's own CRDs (loaded
unchanged from ../shared/upstream: schemas, defaults, minProperties, patterns, enums, CEL rules), at each
Kubernetes minor the management cluster may run."""

import pytest

from nvke.providers.clusterapi import manifests
from nvke.providers.clusterapi.addons import CHART_OF, CHARTS
from nvke.providers.clusterapi.management import TemplateRef
from tests.kubeapi import capi, charts, crds
from tests.kubeapi.server import FakeKubeApi

from .conftest import NS, pool_spec

MACHINES = TemplateRef(f"{capi.INFRA}/{capi.VERSION}", "FakeMachineTemplate", "gpu-h100")
SPEC = pool_spec(labels={"nvke.io/sharing-mode": "exclusive"})


@pytest.fixture(params=["1.34.2", "1.36.0"])
def strict(request):
    with FakeKubeApi(version=request.param) as server:
        capi.install(server, NS)
        yield server


def test_the_control_plane_is_accepted_by_cluster_api_v1beta2(strict):
    """Failure 1 of issue 34: `kubeadmConfigSpec: {}` breaks v1beta2's minProperties: 1 (a 422)."""
    control_plane = manifests.control_plane("c1", NS, 3, "v1.34.2", MACHINES)
    stored = strict.create(control_plane)
    config = stored["spec"]["kubeadmConfigSpec"]
    registrations = [config[part]["nodeRegistration"] for part in ("initConfiguration", "joinConfiguration")]
    for registration in registrations:
        assert {"name": "node-labels", "value": "nvke.io/cluster=c1"} in registration["kubeletExtraArgs"]


def test_every_object_of_a_cluster_and_a_pool_is_accepted(strict):
    template = strict.get(f"{capi.INFRA}/{capi.VERSION}", "FakeClusterTemplate", "gpu-cloud", NS)
    infrastructure = strict.create(manifests.infrastructure_cluster("c1", NS, template))
    strict.create(manifests.control_plane("c1", NS, 3, "v1.34.2", MACHINES))
    cluster = strict.create(manifests.cluster("c1", NS, infrastructure))
    strict.create(manifests.config_template(SPEC, NS, cluster))
    deployment = strict.create(manifests.machine_deployment(SPEC, NS, 2, "v1.34.2", MACHINES, "ubuntu-2404"))
    check = strict.create(manifests.health_check(SPEC, NS, cluster))
    for chart in CHARTS:
        strict.create(manifests.helm_chart_proxy("c1", NS, chart, "v25.3.0", cluster))
    assert deployment["spec"]["rollout"]["strategy"]["type"] == "OnDelete"
    assert check["spec"]["remediation"]["triggerIf"]["unhealthyLessThanOrEqualTo"] == "40%"


@pytest.mark.parametrize("chart", CHARTS, ids=lambda chart: chart.name)
def test_each_charts_values_are_keys_the_chart_has_and_render(chart):
    crds.require()
    assert charts.unknown_keys(chart.values, crds.load(charts.VALUES[chart.name])) == []
    served = {"resource.k8s.io/v1", "resource.k8s.io/v1/DeviceClass"}  # Kubernetes 1.34+
    assert charts.render_error(chart.name, chart.values, chart.namespace, served) == ""


def test_the_dra_driver_serves_mps_and_time_slicing_pools():
    """Failure 5 of issue 34, its values side: the kubelet plugin refuses a GpuConfig with MPS or
    TimeSlicing unless these gates (NVIDIA/k8s-dra-driver-gpu pkg/featuregates) are on; the chart's
    `featureGates` is a map of gate to bool, {} by default, rendered into FEATURE_GATES."""
    crds.require()
    driver = CHART_OF["nvidia-dra-driver-gpu"]
    values = charts.coalesce(crds.load(crds.DRA_DRIVER_VALUES), driver.values)
    assert values["featureGates"] == {"MPSSupport": True, "TimeSlicingSettings": True}
    assert (values["resources"]["gpus"]["enabled"], values["gpuResourcesEnabledOverride"]) == (True, True)
