"""The GPU stack on a cluster Cluster API made: a HelmChartProxy per chart (the GPU Operator's, with its
operands, and NVIDIA's DRA driver), for that cluster alone and owned by its Cluster, which Cluster API's
add-on provider for Helm (simulated: tests/kubeapi/capi_actors.py) releases there. Each add-on's row
follows its chart's HelmReleaseProxy: installing, installed or failed, and a cluster whose add-ons fail
still runs."""

import pytest
import yaml

from clusters import addons
from clusters.models import Cluster, ClusterAddon
from clusters.services import cluster_infrastructure, delete_cluster, provision, refresh_addons, teardown

from .conftest import NS

ADDONS = "addons.cluster.x-k8s.io/v1alpha1"
OPERATOR = ("gpu-operator", "node-feature-discovery", "nvidia-container-toolkit", "dcgm-exporter")


@pytest.fixture
def clusterapi(settings, capi_setting):
    settings.NVKE_PROVIDER = "clusterapi"


@pytest.fixture
def running(clusterapi, owner, make_cluster, cluster_api, workload):
    """Provision a cluster whose control plane comes up at once; the add-ons as `cluster_api` has them."""

    def provisioned() -> Cluster:
        cluster = make_cluster(owner.memberships.get().tenant, "train", status=Cluster.Status.PROVISIONING)
        cluster_api.workloads[f"c{cluster.pk}"] = workload
        provision(cluster.pk)
        cluster.refresh_from_db()
        assert cluster.status == Cluster.Status.RUNNING
        return cluster

    return provisioned


def states(cluster: Cluster) -> dict[str, str]:
    return dict(cluster.addons.values_list("name", "status"))


def condition(cluster: Cluster, kind: str) -> tuple[str, str]:
    cluster.refresh_from_db()
    found = next(c for c in cluster.conditions if c["type"] == kind)
    return found["status"], found["reason"]


def test_a_new_cluster_gets_a_chart_proxy_per_chart_for_itself_alone(running, management):
    cluster = running()
    key = f"c{cluster.pk}"
    proxies = {p["metadata"]["name"]: p for p in management.list(ADDONS, "HelmChartProxy", NS)}
    assert set(proxies) == {f"{key}-gpu-operator", f"{key}-nvidia-dra-driver-gpu"}
    operator = proxies[f"{key}-gpu-operator"]
    assert operator["spec"]["clusterSelector"] == {"matchLabels": {"nvke.io/cluster": key}}
    assert (operator["spec"]["chartName"], operator["spec"]["version"]) == (
        "gpu-operator",
        addons.BY_NAME["gpu-operator"].version,
    )
    values = yaml.safe_load(operator["spec"]["valuesTemplate"])
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    taint = {"key": "nvke.io/pool", "operator": "Exists", "effect": "NoSchedule"}  # NVKE's pool nodes
    assert taint in values["daemonsets"]["tolerations"]
    assert taint in values["node-feature-discovery"]["worker"]["tolerations"]
    dra = yaml.safe_load(proxies[f"{key}-nvidia-dra-driver-gpu"]["spec"]["valuesTemplate"])
    assert taint in dra["kubeletPlugin"]["tolerations"]
    assert [o["kind"] for o in operator["metadata"]["ownerReferences"]] == ["Cluster"]
    assert states(cluster) == {addon.name: "installed" for addon in addons.CATALOG}
    assert condition(cluster, "AddonsReady") == ("True", "Installed")


def test_add_ons_still_installing_are_installing_until_their_release_is_ready(
    running, cluster_api, management
):
    cluster_api.installing.add("gpu-operator")
    cluster = running()
    assert states(cluster) == {
        **{name: "installing" for name in OPERATOR},
        "nvidia-dra-driver-gpu": "installed",
        "nvidia-device-plugin": "installed",  # the DRA driver's release stands in for it
    }
    message = cluster.addons.get(name="gpu-operator").message
    assert message.startswith(f"HelmReleaseProxy gpu-operator-c{cluster.pk}-")
    assert message.endswith(": Waiting for pods.")
    assert condition(cluster, "AddonsReady") == ("False", "Installing")

    assert refresh_addons(cluster.pk) is False  # nothing changed yet: nothing saved or published
    cluster_api.installing.clear()
    management.settle()
    assert refresh_addons(cluster.pk) is True
    assert set(states(cluster).values()) == {"installed"}
    assert condition(cluster, "AddonsReady") == ("True", "Installed")
    assert refresh_addons(cluster.pk) is False  # all installed: the provider is not asked again


def test_a_failed_helm_install_fails_its_add_ons_and_the_cluster_still_runs(running, cluster_api, management):
    cluster_api.failing.add("nvidia-dra-driver-gpu")
    cluster = running()
    failed = cluster.addons.get(name="nvidia-dra-driver-gpu")
    assert failed.status == ClusterAddon.Status.FAILED
    assert failed.message.startswith(f"HelmReleaseProxy nvidia-dra-driver-gpu-c{cluster.pk}-")
    assert failed.message.endswith(": context deadline exceeded")
    assert states(cluster)["gpu-operator"] == "installed"
    assert condition(cluster, "AddonsReady") == ("False", "AddonFailed")
    assert cluster.status == Cluster.Status.RUNNING

    cluster_api.failing.clear()  # the add-on provider's next try succeeds
    management.settle()
    assert refresh_addons(cluster.pk) is True
    assert condition(cluster, "AddonsReady") == ("True", "Installed")


@pytest.mark.parametrize("management", [False], indirect=True)
def test_without_the_helm_add_on_provider_every_add_on_fails_saying_what_to_install(running):
    cluster = running()
    assert set(states(cluster).values()) == {"failed"}
    message = cluster.addons.get(name="gpu-operator").message
    assert message.startswith("The management cluster does not serve HelmChartProxy (addons.cluster")
    assert "install Cluster API's add-on provider for Helm (CAAPH) there." in message
    assert condition(cluster, "AddonsReady") == ("False", "AddonFailed")


def test_a_new_catalog_version_upgrades_the_chart_and_is_installing_until_released(
    running, management, cluster_api
):
    cluster = running()
    key = f"c{cluster.pk}"
    wanted = {**addons.versions(), "gpu-operator": "v25.10.0"}
    cluster_api.helm_behind = True  # the add-on provider has not seen the new version yet
    upgraded = {a.name: a for a in cluster_infrastructure(cluster).install_addons(key, wanted)}
    assert (
        management.get(ADDONS, "HelmChartProxy", f"{key}-gpu-operator", NS)["spec"]["version"] == "v25.10.0"
    )
    assert upgraded["gpu-operator"].status == "installing"
    assert upgraded["gpu-operator"].message.endswith(": upgrading to v25.10.0.")
    assert upgraded["nvidia-dra-driver-gpu"].status == "installed"

    cluster_api.helm_behind = False
    management.settle()
    again = {a.name: a for a in cluster_infrastructure(cluster).install_addons(key, wanted)}
    assert {a.status for a in again.values()} == {"installed"}
    release = management.list(
        ADDONS,
        "HelmReleaseProxy",
        NS,
    )
    operator = next(r for r in release if r["spec"]["chartName"] == "gpu-operator")
    assert (operator["spec"]["version"], operator["status"]["revision"]) == ("v25.10.0", 2)


def test_the_chart_proxies_and_releases_go_with_the_cluster(running, management):
    cluster = running()
    assert len(management.list(ADDONS, "HelmReleaseProxy", NS)) == 2
    delete_cluster(cluster)
    teardown(cluster.pk)
    management.settle()
    assert management.list(ADDONS, "HelmChartProxy", NS) == []
    assert management.list(ADDONS, "HelmReleaseProxy", NS) == []


def test_the_dra_driver_chart_renders_beside_the_gpu_operator(running, management):
    """Failure 4 of issue 34: the DRA driver's chart refuses to render with `resources.gpus.enabled` unless
    `gpuResourcesEnabledOverride` says the device plugin is off on its nodes."""
    cluster = running()
    dra = cluster.addons.get(name="nvidia-dra-driver-gpu")
    assert (dra.status, dra.message) == (ClusterAddon.Status.INSTALLED, "")
    proxies = {p["spec"]["chartName"]: p for p in management.list(ADDONS, "HelmChartProxy", NS)}
    operator = yaml.safe_load(proxies["gpu-operator"]["spec"]["valuesTemplate"])
    driver = yaml.safe_load(proxies["nvidia-dra-driver-gpu"]["spec"]["valuesTemplate"])
    assert operator["devicePlugin"] == {"enabled": False}  # GPUs are the DRA driver's alone
    assert driver["gpuResourcesEnabledOverride"] is True
    # MPS and time-slicing pools need the kubelet plugin's alpha gates (off by default)
    assert driver["featureGates"] == {"MPSSupport": True, "TimeSlicingSettings": True}
