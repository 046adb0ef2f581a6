"""Upstream CRDs served unchanged: their schemas, defaults and CEL rules refuse what a real cluster refuses,
through the official client; and the charts' own fail conditions, which the simulated Helm add-on provider
honours."""

import json
import re

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from . import capi, charts, crd_rules, crds
from .capi_actors import ClusterAPI
from .server import FakeKubeApi

NS = "nvke"
KCP = ("controlplane.cluster.x-k8s.io", "v1beta2", NS, "kubeadmcontrolplanes")
TEMPLATES = ("bootstrap.cluster.x-k8s.io", "v1beta2", NS, "kubeadmconfigtemplates")


@pytest.fixture(params=["1.34.2", "1.36.0"])
def management(request):
    with FakeKubeApi(version=request.param) as server:
        capi.install(server, NS)
        yield server


@pytest.fixture
def custom(management):
    configuration = kubernetes.client.Configuration(
        host=management.url,
        api_key={"authorization": f"Bearer {management.token}"},
        ca_cert_data=management.ca_bundle,
    )
    with kubernetes.client.ApiClient(configuration) as api_client:
        yield kubernetes.client.CustomObjectsApi(api_client)


def refused(call, *args) -> dict:
    with pytest.raises(ApiException) as error:
        call(*args)
    assert error.value.status == 422
    return json.loads(error.value.body)


def control_plane(config_spec: dict) -> dict:
    machines = {"apiGroup": capi.INFRA, "kind": "FakeMachineTemplate", "name": "control-plane"}
    return {
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": "c1-control-plane"},
        "spec": {
            "version": "v1.34.2",
            "machineTemplate": {"spec": {"infrastructureRef": machines}},
            "kubeadmConfigSpec": config_spec,
        },
    }


def test_min_properties_refuses_an_empty_kubeadm_config_spec(custom):
    status = refused(custom.create_namespaced_custom_object, *KCP, control_plane({}))
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.kubeadmConfigSpec",
            "message": "Invalid value: 0: spec.kubeadmConfigSpec in body should have at least 1 properties",
        }
    ]


def test_a_cel_rule_refuses_two_kubelet_args_of_one_name(custom):
    args = [{"name": "node-labels", "value": "a=b"}, {"name": "node-labels", "value": "c=d"}]
    template = {
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": "pool"},
        "spec": {
            "template": {"spec": {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": args}}}}
        },
    }
    # a list-type map keyed by name and value: the schema's uniqueness passes, the CEL rule does not
    status = refused(custom.create_namespaced_custom_object, *TEMPLATES, template)
    cause = status["details"]["causes"][0]
    assert cause["field"] == "spec.template.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs"
    assert cause["message"] == 'Invalid value: "array": kubeletExtraArgs name must be unique'
    args[1]["name"] = "max-pods"
    created = custom.create_namespaced_custom_object(*TEMPLATES, template)
    assert created["metadata"]["name"] == "pool"


def test_defaults_come_from_the_crd(custom):
    env = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"key": "token"}}}
    config = {"clusterConfiguration": {"apiServer": {"extraEnvs": [env]}}}
    created = custom.create_namespaced_custom_object(*KCP, control_plane(config))
    stored = created["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraEnvs"][0]
    assert stored["valueFrom"]["secretKeyRef"] == {"key": "token", "name": ""}  # the schema's default


def test_a_transition_rule_compares_with_the_stored_object():
    crds.require()
    schema = {
        "type": "object",
        "properties": {
            "driverType": {
                "type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}],
            }
        },
    }
    assert crd_rules.causes(schema, {"driverType": "gpu"}) == []  # a create: nothing to compare with
    assert crd_rules.causes(schema, {"driverType": "gpu"}, {"driverType": "gpu"}) == []
    assert crd_rules.causes(schema, {"driverType": "vgpu"}, {"driverType": "gpu"}) == [
        ("driverType", "FieldValueInvalid", 'Invalid value: "string": immutable')
    ]


def _rules(schema) -> list[str]:
    if isinstance(schema, dict):
        found = [r["rule"] for r in schema.get("x-kubernetes-validations") or []]
        return found + [rule for value in schema.values() for rule in _rules(value)]
    if isinstance(schema, list):
        return [rule for value in schema for rule in _rules(value)]
    return []


def test_every_upstream_cel_rule_uses_functions_celpy_provides():
    crds.require()
    paths = crds.CLUSTER_API + crds.HELM_ADDON_PROVIDER + crds.GPU_OPERATOR
    rules = sorted({rule for path in paths for rule in _rules(crds.load(path))})
    assert len(rules) == 6  # distinct rules at the README's commits
    calls = {name for rule in rules for name in re.findall(r"\.?([A-Za-z_]\w*)\(", rule)}
    assert calls <= {"all", "exists_one", "exists", "filter", "map", "size", "matches", "has"}, calls


@pytest.fixture
def workload(management):
    with FakeKubeApi(version=management.version, token="workload-admin") as server:
        yield server


def test_the_helm_add_on_provider_refuses_a_chart_whose_templates_fail(management, workload):
    cluster_api = ClusterAPI(management, NS)
    cluster_api.workloads["c1"] = workload
    management.create(
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": NS, "labels": {"nvke.io/cluster": "c1"}},
            "spec": {"paused": False},
        }
    )
    management.create(
        {
            "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
            "kind": "HelmChartProxy",
            "metadata": {"name": "c1-dra", "namespace": NS},
            "spec": {
                "clusterSelector": {"matchLabels": {"nvke.io/cluster": "c1"}},
                "repoURL": "https://helm.ngc.nvidia.com/nvidia",
                "chartName": charts.DRA_DRIVER,
                "namespace": "nvidia-dra-driver-gpu",
                "valuesTemplate": "nvidiaDriverRoot: /run/nvidia/driver\n",  # resources.gpus.enabled: true
            },
        }
    )
    management.settle()
    release = management.list("addons.cluster.x-k8s.io/v1alpha1", "HelmReleaseProxy", NS)[0]
    ready = next(c for c in release["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "HelmInstallOrUpgradeFailed")
    assert ready["message"].startswith("execution error at (nvidia-dra-driver-gpu/templates/validation.yaml)")
    assert "--set 'gpuResourcesEnabledOverride=true'" in ready["message"]
    assert "status" not in release["status"]  # Helm made no release


@pytest.mark.parametrize(
    ("chart", "values", "apis", "failure"),
    [
        (charts.DRA_DRIVER, {"gpuResourcesEnabledOverride": True}, {"resource.k8s.io/v1"}, ""),
        (charts.DRA_DRIVER, {"gpuResourcesEnabledOverride": True}, set(), "No supported resource.k8s.io"),
        (charts.DRA_DRIVER, {"resources": {"gpus": {"enabled": False}}}, {"resource.k8s.io/v1"}, ""),
        (charts.GPU_OPERATOR, {}, set(), ""),
        (charts.GPU_OPERATOR, {"gpuCluster": {"deployCR": True}}, set(), "clusterPolicy.deployCR and"),
        (charts.GPU_OPERATOR, {"cdi": {"enabled": False, "nriPluginEnabled": True}}, set(), "the NRI Plugin"),
        (
            charts.GPU_OPERATOR,
            {"devicePlugin": {"config": {"create": True}}},
            set(),
            "devicePlugin.config.data",
        ),
    ],
)
def test_each_charts_fail_conditions(chart, values, apis, failure):
    crds.require()
    error = charts.render_error(chart, values, "gpu", apis)
    assert (error.partition("): ")[2].startswith(failure) if failure else error == "") is True, error


def test_a_map_list_refuses_a_repeated_key():
    schema = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name", "value"],
        "items": {"type": "object"},
    }
    args = [{"name": "max-pods", "value": "110"}, {"name": "max-pods", "value": "110"}]
    assert crd_rules.causes(schema, args, path=["args"]) == [
        ("args[1]", "FieldValueDuplicate", 'Duplicate value: {"name": "max-pods", "value": "110"}')
    ]


def test_a_rule_calling_a_function_celpy_lacks_is_refused_loudly():
    schema = {"type": "string", "x-kubernetes-validations": [{"rule": "isQuantity(self)"}]}
    with pytest.raises(crd_rules.UnsupportedRule, match="isQuantity"):
        crd_rules.causes(schema, "1Gi")
