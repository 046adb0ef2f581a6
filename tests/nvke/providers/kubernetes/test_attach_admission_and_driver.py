"""Attach refuses a cluster without NVKE's admission policies (or with older ones), and one where NVIDIA's
DRA driver runs without its DeviceClasses, naming what to apply or set; it records the driver's feature
gates, and a pool whose sharing needs a gate the driver lacks is refused when created, saying what to
set. Against the stand-in through the official client."""

import pytest

from nodepools.models import NodePool
from nvke.errors import Incompatible
from nvke.providers.kubernetes import admission, dra_driver
from tests.conftest import install_nvke_policies
from tests.kubeapi import objects
from tests.kubeapi.server import FakeKubeApi

pytestmark = pytest.mark.django_db

DRIVER_NAMESPACE = "dra-driver-nvidia-gpu"


def kubelet_plugin(gates: dict[str, bool] | None, *, as_argument: bool = False) -> dict:
    """The kubelet plugin DaemonSet as NVIDIA's chart renders it (deployments/helm/dra-driver-nvidia-gpu/
    templates/kubeletplugin.yaml): FEATURE_GATES on both containers when `featureGates` is set."""
    rendered = "".join(f"{key}={str(value).lower()}," for key, value in (gates or {}).items())
    env = [{"name": "FEATURE_GATES", "value": rendered}] if gates and not as_argument else []
    args = [f"--feature-gates={rendered}"] if gates and as_argument else []
    containers = [
        {"name": name, "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0", "env": env, "args": args}
        for name in ("compute-domains", "gpus")
    ]
    labels = {
        "app.kubernetes.io/name": "dra-driver-nvidia-gpu",
        "dra-driver-nvidia-gpu-component": "kubelet-plugin",
        "nvidia-dra-driver-gpu-component": "kubelet-plugin",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dra-driver-nvidia-gpu-kubelet-plugin", "namespace": DRIVER_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}},
        },
    }


def with_driver(server, gates, classes=dra_driver.DEVICE_CLASSES, **options):
    server.create(objects.namespace(DRIVER_NAMESPACE))
    server.create(kubelet_plugin(gates, **options))
    for name in classes:
        server.create(objects.device_class(name))
    server.settle()


def checks(body: dict) -> dict[str, str]:
    return {c["check"]: c["message"] for c in body["details"]["checks"]}


def post_attach(api, server):
    body = {"name": "onprem", "endpoint": server.url, "token": server.token, "ca_bundle": server.ca_bundle}
    return api.post("/api/v1/clusters/attach/", body, format="json")


def gpu_server(version: str) -> FakeKubeApi:
    server = FakeKubeApi(version=version).start()
    objects.gpu_operator(server)
    server.create(objects.gpu_node("gpu-a"))
    return server


@pytest.mark.parametrize("version", ["1.34.2", "1.36.0"])
def test_a_cluster_without_nvkes_policies_is_refused_naming_them(api, catalog, version):
    server = gpu_server(version)
    try:
        answer = post_attach(api, server)
        assert answer.status_code == 400
        body = answer.json()
        assert body["code"] == "admission_policies_missing"
        named = checks(body)["admission"]
        assert "ValidatingAdmissionPolicy/nvke-gpu-pods" in named and "rbac-manifest" in named
        assert ("MutatingAdmissionPolicy/nvke-gpu-pods" in named) is (version == "1.36.0")
        install_nvke_policies(server)
        assert post_attach(api, server).status_code == 201
    finally:
        server.stop()


def test_an_older_policy_is_refused_as_out_of_date(api, catalog, gpu_cluster):
    policy = gpu_cluster.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", admission.NAME)
    policy["metadata"]["annotations"][admission.DIGEST] = "0000000000000000"
    gpu_cluster.update(policy)
    answer = post_attach(api, gpu_cluster)
    assert answer.status_code == 400
    assert "(ValidatingAdmissionPolicy/nvke-gpu-pods)" in checks(answer.json())["admission"]


def test_nvkes_manifest_objects_follow_the_minor():
    kinds = [d["kind"] for d in admission.objects((1, 35))]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    assert {d["kind"] for d in admission.objects()} >= {
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }


def test_a_dra_driver_without_its_device_classes_is_refused(api, catalog, gpu_cluster):
    with_driver(gpu_cluster, {"MPSSupport": True}, classes=[dra_driver.DEVICE_CLASSES[0]])
    answer = post_attach(api, gpu_cluster)
    assert answer.status_code == 400 and answer.json()["code"] == "no_device_class"
    message = checks(answer.json())["dra_driver"]
    assert "mig.nvidia.com" in message and "resources.gpus.enabled=true" in message


@pytest.mark.parametrize("as_argument", [False, True])
def test_attach_records_the_drivers_gates(api, catalog, gpu_cluster, as_argument):
    with_driver(gpu_cluster, {"MPSSupport": True, "TimeSlicingSettings": False}, as_argument=as_argument)
    answer = post_attach(api, gpu_cluster)
    assert answer.status_code == 201, answer.json()
    assert answer.json()["observed"]["dra_driver"] == {
        "running": True,
        "device_classes": ["gpu.nvidia.com", "mig.nvidia.com"],
        "gates": ["MPSSupport"],
    }


def test_without_the_driver_nothing_about_it_is_asked(api, catalog, gpu_cluster):
    answer = post_attach(api, gpu_cluster)
    assert answer.status_code == 201
    assert answer.json()["observed"]["dra_driver"] == {"running": False, "device_classes": [], "gates": []}


def test_a_pool_whose_sharing_the_driver_cannot_serve_is_refused_saying_what_to_set(
    gpu_cluster, attach, sharing_pool
):
    with_driver(gpu_cluster, {"TimeSlicingSettings": True})  # the chart's default is no gates at all
    cluster = attach(gpu_cluster)
    with pytest.raises(Incompatible) as refused:
        sharing_pool(cluster, "mps", model="h100-sxm5-80gb", name="mps")
    assert refused.value.field == "sharing_mode"
    assert "featureGates.MPSSupport=true" in refused.value.message
    assert not NodePool.objects.filter(name="mps").exists()
    assert (
        sharing_pool(cluster, "time-slicing", model="h100-sxm5-80gb", name="slices").sharing_mode
        == "time-slicing"
    )


def test_the_gates_are_read_as_the_chart_renders_them():
    assert dra_driver.parse_gates("MPSSupport=true,TimeSlicingSettings=false,") == {
        "MPSSupport": True,
        "TimeSlicingSettings": False,
    }
    assert dra_driver.pool_refusal({"dra_driver": {"running": False}}, "mps") is None
    assert dra_driver.pool_refusal({"dra_driver": {"running": True, "gates": []}}, "exclusive") is None
    assert "TimeSlicingSettings" in dra_driver.pool_refusal(
        {"dra_driver": {"running": True, "gates": []}}, "fractional"
    )
