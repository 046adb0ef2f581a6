"""Admission policies on the stand-in, through the official client: NVKE's policies add to a GPU pod in a
managed namespace only what it lacks, where MutatingAdmissionPolicy is served (1.36+), and refuse, saying
what to add, where it is not (1.34); a policy the stand-in cannot evaluate is refused when created. (A
claim pod held from creation, a shared-GPU pod sent to NVKE's scheduler, and only NVKE lifting the gate,
run on both targets, the real cluster
included: tests/nvke/providers/kubernetes/test_both_targets_strict.py.)"""

import copy
import json

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from nvke.providers.kubernetes import admission, dra

from .fixtures import client_configuration
from .objects import namespace, pod
from .server import FakeKubeApi

GATE = {"name": dra.GATE}
SLOT = "nvke.io/gpu-share"
TOLERATION = {"key": "nvke.io/pool", "operator": "Exists", "effect": "NoSchedule"}


def apply(server: FakeKubeApi, documents: list[dict]) -> None:
    registration = kubernetes.client.AdmissionregistrationV1Api(server.api_client)
    create = {
        "ValidatingAdmissionPolicy": registration.create_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": registration.create_validating_admission_policy_binding,
        "MutatingAdmissionPolicy": registration.create_mutating_admission_policy,
        "MutatingAdmissionPolicyBinding": registration.create_mutating_admission_policy_binding,
    }
    for document in documents:
        create[document["kind"]](copy.deepcopy(document))


@pytest.fixture(params=["1.34.2", "1.36.0"])
def cluster(request):
    """A cluster at that minor with NVKE's policies for it and a managed namespace `ml`."""
    with FakeKubeApi(version=request.param) as server:
        server.api_client = kubernetes.client.ApiClient(client_configuration(server))
        server.create(namespace("ml", {dra.MANAGED: "true"}))
        server.create(namespace("nvke-system"))
        minor = tuple(int(part) for part in request.param.split(".")[:2])
        apply(server, admission.objects(minor))
        server.core = kubernetes.client.CoreV1Api(server.api_client)
        server.minor = minor
        yield server
        server.api_client.close()


def claim_pod(name: str, **spec) -> dict:
    body = pod(name, namespace="ml")
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    body["spec"].update(spec)
    return body


def shared_pod(name: str, **spec) -> dict:
    body = pod(name, namespace="ml")
    limits = {"nvidia.com/gpu-memory": "4Gi", "nvidia.com/gpu-utilization": "50"}
    body["spec"]["containers"][0]["resources"] = {"limits": limits}
    body["spec"].update(spec)
    return body


def slotted(body: dict) -> dict:
    body["spec"]["containers"][0]["resources"]["limits"][SLOT] = "1"
    return body


def created(server: FakeKubeApi, body: dict) -> dict:
    server.core.create_namespaced_pod(body["metadata"]["namespace"], body)
    return server.get("v1", "Pod", body["metadata"]["name"], body["metadata"]["namespace"])


def refusal(server: FakeKubeApi, body: dict) -> ApiException:
    with pytest.raises(ApiException) as raised:
        server.core.create_namespaced_pod(body["metadata"]["namespace"], body)
    return raised.value


def mutating(server: FakeKubeApi) -> bool:
    return server.minor >= admission.MUTATING_VERSION


def test_a_pod_that_brings_its_gate_and_toleration_passes_at_every_minor(cluster):
    mine = {"key": "example.com/team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    spec = created(cluster, claim_pod("train", schedulingGates=[GATE], tolerations=[mine, TOLERATION]))[
        "spec"
    ]
    assert spec["schedulingGates"] == [GATE], "NVKE's gate is not added twice"
    assert spec["tolerations"] == [mine, TOLERATION]


def test_a_gate_is_appended_to_the_pods_own(cluster):
    own = {"name": "example.com/quota"}
    body = claim_pod("train", schedulingGates=[own], tolerations=[TOLERATION])
    if mutating(cluster):
        assert created(cluster, body)["spec"]["schedulingGates"] == [own, GATE]
    else:
        assert "add spec.schedulingGates" in refusal(cluster, body).body


def test_the_slot_goes_to_the_container_that_asks_for_the_share(cluster):
    """The device plugin answers the container that holds the slot: the GPU container, not the first."""
    body = shared_pod("infer", tolerations=[TOLERATION], schedulerName="nvke")
    sidecar = {"name": "proxy", "image": "envoyproxy/envoy:v1.31.0"}
    body["spec"]["containers"].insert(0, sidecar)
    if mutating(cluster):
        sidecar, gpu = created(cluster, body)["spec"]["containers"]
        assert "resources" not in sidecar
        assert gpu["resources"]["limits"] == {
            **shared_pod("x")["spec"]["containers"][0]["resources"]["limits"],
            SLOT: "1",
        }
    else:
        body["spec"]["containers"][0]["resources"] = {"limits": {SLOT: "1"}}
        assert "add nvke.io/gpu-share: 1" in refusal(cluster, body).body, "a slot on the sidecar is no slot"


def test_a_pod_that_brings_its_slot_keeps_it(cluster):
    body = slotted(shared_pod("infer", tolerations=[TOLERATION], schedulerName="nvke"))
    assert created(cluster, body)["spec"]["containers"][0]["resources"]["limits"][SLOT] == "1"


def test_pods_outside_managed_namespaces_and_without_gpus_are_left_alone(cluster):
    body = claim_pod("elsewhere")
    body["metadata"]["namespace"] = "default"
    assert "schedulingGates" not in created(cluster, body)["spec"]
    plain = created(cluster, pod("web", namespace="ml"))["spec"]
    assert "schedulingGates" not in plain and "tolerations" not in plain


def test_mutating_admission_policy_is_served_from_1_36_only(cluster):
    groups = kubernetes.client.AdmissionregistrationV1Api(cluster.api_client).get_api_resources()
    kinds = {resource.kind for resource in groups.resources}
    assert "ValidatingAdmissionPolicy" in kinds
    assert ("MutatingAdmissionPolicy" in kinds) is mutating(cluster)


def test_a_policy_the_stand_in_cannot_evaluate_is_refused_when_created(kubeapi):
    registration = kubernetes.client.AdmissionregistrationV1Api(
        kubernetes.client.ApiClient(client_configuration(kubeapi))
    )
    policy = admission.validating()[0]
    policy["metadata"]["name"] = "broken"
    policy["spec"]["validations"] = [{"expression": "object.spec.containers.exists(c, "}]
    with pytest.raises(ApiException) as raised:
        registration.create_validating_admission_policy(policy)
    assert raised.value.status == 422 and "spec.validations[0].expression" in raised.value.body
    policy["spec"]["validations"] = [{"expression": "true"}]
    policy["spec"]["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
    with pytest.raises(ApiException) as raised:
        registration.create_validating_admission_policy(policy)
    assert "spec.paramKind" in raised.value.body and "not evaluated by the stand-in" in raised.value.body


def test_message_expression_and_reason_shape_the_denial(kubeapi):
    client = kubernetes.client.ApiClient(client_configuration(kubeapi))
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "names"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [{"name": "labelled", "expression": "has(object.metadata.labels)"}],
            "validations": [
                {
                    "expression": "object.metadata.name.startsWith('ok-')",
                    "messageExpression": "'name ' + object.metadata.name + ' lacks ok-'",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "names-binding"},
        "spec": {"policyName": "names", "validationActions": ["Deny"]},
    }
    apply(type("S", (), {"api_client": client})(), [policy, binding])
    core = kubernetes.client.CoreV1Api(client)
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_pod("default", pod("bad", labels={"a": "b"}))
    assert raised.value.status == 403
    assert (
        "pods \"bad\" is forbidden: ValidatingAdmissionPolicy 'names' with binding 'names-binding' denied "
        "request: name bad lacks ok-" == json.loads(raised.value.body)["message"]
    )
    core.create_namespaced_pod("default", pod("ok-good", labels={"a": "b"}))
    unlabelled = pod("bad")
    unlabelled["metadata"].pop("labels")
    core.create_namespaced_pod("default", unlabelled)  # matchConditions false: the policy does not apply


def rule(operations=("CREATE",)) -> dict:
    return {"apiGroups": [""], "apiVersions": ["v1"], "operations": list(operations), "resources": ["pods"]}


def mutating_policy(name: str, expression: str, **spec) -> list[dict]:
    group = "admissionregistration.k8s.io/v1"
    return [
        {
            "apiVersion": group,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {"resourceRules": [rule()]},
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
                **spec,
            },
        },
        {
            "apiVersion": group,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name},
        },
    ]


@pytest.fixture
def cluster_1_36():
    with FakeKubeApi(version="1.36.0") as server:
        server.api_client = kubernetes.client.ApiClient(client_configuration(server))
        server.core = kubernetes.client.CoreV1Api(server.api_client)
        yield server
        server.api_client.close()


def test_an_if_needed_policy_runs_again_after_a_later_one_changed_the_object(cluster_1_36):
    labels = 'has(object.metadata.labels) && "claimed" in object.metadata.labels'
    label_if_claims = (
        f"has(object.spec.resourceClaims) && !({labels}) ? "
        '[JSONPatch{op: "add", path: "/metadata/labels", value: {"claimed": "yes"}}] : []'
    )
    add_claims = (
        'has(object.spec.resourceClaims) ? [] : [JSONPatch{op: "add", path: "/spec/resourceClaims", '
        'value: [Object.spec.resourceClaims{name: "gpu", resourceClaimName: "shared"}]}]'
    )
    apply(cluster_1_36, mutating_policy("a-label", label_if_claims, reinvocationPolicy="IfNeeded"))
    apply(cluster_1_36, mutating_policy("b-claims", add_claims))
    body = pod("train")
    body["metadata"].pop("labels")
    made = created(cluster_1_36, body)
    assert made["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "shared"}]
    assert made["metadata"]["labels"] == {"claimed": "yes"}, "a-label ran again once b-claims added claims"
    never = mutating_policy(
        "c-never", label_if_claims.replace("claimed", "again"), reinvocationPolicy="Never"
    )
    never[0]["metadata"]["name"] = never[1]["metadata"]["name"] = never[1]["spec"]["policyName"] = "0-never"
    apply(cluster_1_36, never)
    body = pod("other")
    body["metadata"].pop("labels")
    made = created(cluster_1_36, body)
    assert "again" not in made["metadata"]["labels"], "a Never policy is not reinvoked"


@pytest.mark.parametrize(("failure_policy", "admitted"), [("Fail", False), ("Ignore", True)])
def test_an_expression_that_errs_follows_the_failure_policy(kubeapi, failure_policy, admitted):
    policy = admission.validating()[0]
    policy["metadata"]["name"] = "errs"
    policy["spec"] = {
        "failurePolicy": failure_policy,
        "matchConstraints": {"resourceRules": [rule()]},
        "validations": [{"expression": "object.spec.nodeName == 'x'"}],  # absent field: no such key
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "errs"},
        "spec": {"policyName": "errs", "validationActions": ["Deny"]},
    }
    kubeapi.api_client = kubernetes.client.ApiClient(client_configuration(kubeapi))
    apply(kubeapi, [policy, binding])
    core = kubernetes.client.CoreV1Api(kubeapi.api_client)
    if admitted:
        core.create_namespaced_pod("default", pod("p"))
    else:
        with pytest.raises(ApiException) as raised:
            core.create_namespaced_pod("default", pod("p"))
        assert (
            "expression 'object.spec.nodeName == 'x'' resulted in error"
            in json.loads(raised.value.body)["message"]
        )
    assert (kubeapi.get("v1", "Pod", "p") is not None) is admitted


def test_a_gpu_container_past_the_sixteenth_is_told_to_bring_its_slot(cluster):
    """The mutation looks among the first MAX_CONTAINERS containers; the validation sees them all."""
    body = shared_pod("infer", tolerations=[TOLERATION], schedulerName="nvke")
    sidecars = [{"name": f"side-{i}", "image": "busybox:1.37"} for i in range(admission.MAX_CONTAINERS)]
    body["spec"]["containers"][:0] = sidecars
    assert "add nvke.io/gpu-share: 1" in refusal(cluster, body).body
