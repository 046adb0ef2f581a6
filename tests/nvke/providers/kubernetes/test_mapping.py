"""The Kubernetes provider's pure parts: GFD labels and ResourceSlices to NodeInfo, selectors, the RBAC
manifest (checked against the official schemas) and kubeconfig parsing."""

import base64

import kubernetes_validate
import pytest
import yaml

from clusters.kubeconfig import parse_kubeconfig
from nvke import quantity
from nvke.errors import DomainError
from nvke.providers.kubernetes import gpus, rbac
from nvke.providers.kubernetes.labels import matches
from nvke.providers.kubernetes.operations import evictable, image_version

H100 = "NVIDIA H100 80GB HBM3"


def node(name="gpu-a", labels=None, ready="True", unschedulable=None):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": unschedulable} if unschedulable is not None else {},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "allocatable": {"cpu": "63500m", "memory": "527Gi", "nvidia.com/gpu": "8"},
        },
    }


GFD = {
    gpus.PRODUCT: "NVIDIA-H100-80GB-HBM3",
    gpus.COUNT: "2",
    gpus.MEMORY: "81559",
    gpus.DRIVER_FULL: "570.133.20",
    gpus.POOL_LABEL: "train",
}


def test_gfd_labels_give_the_node_its_driver_resources_and_gpus():
    info = gpus.node_info(node(labels=GFD), [])
    assert (info.name, info.pool, info.ready, info.unschedulable) == ("gpu-a", "train", True, False)
    assert info.driver_version == "570.133.20"
    assert (info.cpu_millicores, info.memory_mib) == (63500, 527 * 1024)
    assert [(g.index, g.memory_mib) for g in info.gpus] == [(0, 81559), (1, 81559)]
    assert {(g.uuid, g.healthy) for g in info.gpus} == {("", None)}, "unknown: the agent tells UUIDs"


def test_not_ready_and_cordoned_nodes_say_so():
    info = gpus.node_info(node(labels=GFD, ready="False", unschedulable=True), [])
    assert (info.ready, info.unschedulable) == (False, True)


def test_deprecated_driver_labels_are_read_when_the_current_ones_are_missing():
    labels = {
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
    }
    assert gpus.driver_version(labels) == "550.54.15"


def test_resource_slices_give_uuids_and_memory_and_skip_mig_devices():
    piece = {
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "gpu-a",
            "devices": [
                {
                    "name": "gpu-1",
                    "attributes": {"uuid": {"string": "GPU-2222"}, "index": {"int": 1}},
                    "capacity": {"memory": {"value": "80Gi"}},
                },
                {
                    "name": "gpu-0",
                    "attributes": {"uuid": {"string": "GPU-1111"}},
                    "capacity": {"memory": {"value": "80Gi"}},
                },
                {"name": "gpu-0-mig-9-4-4", "attributes": {"uuid": {"string": "MIG-1"}}, "capacity": {}},
            ],
        }
    }
    info = gpus.node_info(node(labels=GFD), [piece])
    assert [(g.index, g.uuid, g.memory_mib) for g in info.gpus] == [
        (0, "GPU-1111", 81920),
        (1, "GPU-2222", 81920),
    ]


@pytest.mark.parametrize(
    ("label", "product"),
    [
        ("NVIDIA-H100-80GB-HBM3", H100),
        ("NVIDIA-H100-80GB-HBM3-SHARED", H100),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA A100-SXM4-40GB"),
    ],
)
def test_gfd_product_suffixes_are_stripped_to_match_the_catalog(label, product):
    assert gpus.base_product(label) == gpus.product_label(product)


@pytest.mark.parametrize(("text", "value"), [("64", 64), ("63500m", 63.5), ("2Gi", 2**31), ("1k", 1000)])
def test_quantities(text, value):
    assert quantity.parse(text) == value


def test_a_bad_quantity_is_refused():
    with pytest.raises(ValueError):
        quantity.parse("12Zb")


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {"a": "1"}, True),
        (None, {"a": "1"}, False),
        ({"matchLabels": {"app": "web"}}, {"app": "web"}, True),
        ({"matchLabels": {"app": "web"}}, {"app": "db"}, False),
        (
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
            {"tier": "b"},
            True,
        ),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, {"tier": "a"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
    ],
)
def test_label_selectors(selector, labels, expected):
    assert matches(selector, labels) is expected


def pod(**meta):
    return {"metadata": {"name": "p", "namespace": "default", **meta}, "status": {"phase": "Running"}}


def test_a_drain_skips_mirror_daemonset_and_finished_pods():
    assert evictable(pod())
    assert not evictable(pod(annotations={"kubernetes.io/config.mirror": "x"}))
    assert not evictable(pod(ownerReferences=[{"kind": "DaemonSet", "name": "d", "controller": True}]))
    assert evictable(pod(ownerReferences=[{"kind": "ReplicaSet", "name": "r", "controller": True}]))
    assert not evictable({**pod(), "status": {"phase": "Succeeded"}})


def test_the_driver_version_is_read_from_the_image_tag():
    driver = {
        "spec": {
            "containers": [
                {"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:570.133.20-ubuntu22.04"}
            ]
        }
    }
    assert image_version(driver) == "570.133.20"


def test_the_rbac_manifest_is_valid_kubernetes_and_grants_exactly_the_checked_rules():
    documents = yaml.safe_load(rbac.manifest())["items"]
    for document in documents:  # each at the oldest minor NVKE supports that serves its kind
        served_from = "1.36.0" if document["kind"].startswith("MutatingAdmissionPolicy") else "1.34.0"
        kubernetes_validate.validate(document, served_from, strict=True)
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    checked = {(rule.group, rule.resource, verb) for rule, verb in rbac.checks(dra=True)}
    assert granted == checked
    assert ("", "nodes", "delete") not in granted, "NVKE never deletes a tenant's nodes"
    assert {r for _, r, _ in granted} >= {"nodes", "pods/eviction", "nvidiadrivers"}
    # who reads GPU allocations is the tenant's RBAC: a role to bind, which namespace viewers get too
    crd = next(d for d in documents if d["kind"] == "CustomResourceDefinition")
    assert (crd["spec"]["group"], crd["spec"]["names"]["plural"]) == ("nvke.io", "gpuallocations")
    viewer = next(d for d in documents if d["metadata"]["name"] == "nvke-gpuallocation-viewer")
    assert viewer["kind"] == "ClusterRole"
    assert viewer["metadata"]["labels"] == {"rbac.authorization.k8s.io/aggregate-to-view": "true"}
    assert viewer["rules"] == [
        {"apiGroups": ["nvke.io"], "resources": ["gpuallocations"], "verbs": ["get", "list", "watch"]}
    ]


def kubeconfig(user: dict, cluster: dict | None = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "k", "cluster": cluster or {"server": "https://10.0.0.1:6443"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "ctx", "context": {"cluster": "k", "user": "u"}}],
            "current-context": "ctx",
        }
    )


def test_a_kubeconfig_gives_endpoint_token_and_ca():
    ca = "-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n"
    text = kubeconfig(
        {"token": "sa-token"},
        {
            "server": "https://10.0.0.1:6443",
            "certificate-authority-data": base64.b64encode(ca.encode()).decode(),
        },
    )
    assert parse_kubeconfig(text) == ("https://10.0.0.1:6443", "sa-token", ca)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("clusters: [unclosed", "not YAML"),
        ("- just\n- a list", "not a kubectl Config"),
        (kubeconfig({"client-certificate-data": "x", "client-key-data": "y"}), "client-certificate-data"),
        (kubeconfig({"exec": {"command": "aws"}}), "exec"),
        (
            kubeconfig({"token": "t"}, {"server": "https://x", "certificate-authority": "/etc/ca.pem"}),
            "CA file",
        ),
        (kubeconfig({"token": "t"}, {"server": "https://x", "certificate-authority-data": "%%%"}), "base64"),
    ],
)
def test_kubeconfigs_nvke_cannot_use_are_refused_naming_the_field(text, words):
    with pytest.raises(DomainError) as refused:
        parse_kubeconfig(text)
    assert refused.value.field == "kubeconfig"
    assert words in refused.value.message
