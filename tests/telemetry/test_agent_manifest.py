"""The nvke-agent manifest of an attached cluster: valid Kubernetes (checked offline and by applying it
to the fake API server), one working node token per NVKE node, and for owners and admins only."""

import kubernetes_validate
import pytest
import yaml

from nodepools.models import Node
from telemetry import ingest

pytestmark = pytest.mark.django_db


@pytest.fixture
def attached(attach, gpu_cluster, make_attached_pool):
    cluster = attach(gpu_cluster)
    make_attached_pool(cluster, 3)
    return cluster


def test_the_manifest_installs_the_agent_with_a_working_token_per_node(api, attached, gpu_cluster):
    answer = api.post(f"/api/v1/clusters/{attached.pk}/agent-manifest/")
    assert answer.status_code == 200, answer.content
    assert answer["Cache-Control"] == "no-store"
    manifest = yaml.safe_load(answer.content)
    for item in manifest["items"]:
        kubernetes_validate.validate(item, "1.34.0", strict=True)
    secret, daemonset = manifest["items"]
    assert sorted(secret["stringData"]) == ["gpu-a", "gpu-b", "gpu-c"]
    for node, token in secret["stringData"].items():
        assert ingest.authenticate(token).node_id == Node.objects.get(pool__cluster=attached, name=node).pk
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "NVKE_URL", "value": "http://testserver"} in container["env"]
    assert gpu_cluster.get("v1", "Namespace", "nvke-system"), "attaching applied NVKE's access manifest"
    for item in manifest["items"]:  # the fake API server validates each against the official schema
        gpu_cluster.create(item)


def test_a_new_manifest_replaces_the_old_tokens(api, attached):
    first = yaml.safe_load(api.post(f"/api/v1/clusters/{attached.pk}/agent-manifest/").content)
    api.post(f"/api/v1/clusters/{attached.pk}/agent-manifest/")
    with pytest.raises(ingest.InvalidNodeToken):
        ingest.authenticate(first["items"][0]["stringData"]["gpu-a"])


def test_a_provisioned_cluster_has_no_agent_manifest(api, make_cluster, owner):
    cluster = make_cluster(owner.memberships.get().tenant)
    answer = api.post(f"/api/v1/clusters/{cluster.pk}/agent-manifest/")
    assert answer.status_code == 400 and answer.json()["code"] == "not_attached"


def test_members_may_not_issue_node_tokens(client_for, make_member, attached):
    member = make_member("acme", "member")
    assert client_for(member).post(f"/api/v1/clusters/{attached.pk}/agent-manifest/").status_code == 403
