"""Node pools of an attached cluster: created through the API and the form with a node selector, they
adopt the matching nodes; a node selector on a cluster NVKE provisioned is refused naming the field."""

import pytest

from nodepools.models import NodePool

pytestmark = pytest.mark.django_db

POOL = {"name": "train", "gpu_model": "h100-sxm5-80gb", "gpus_per_node": 8, "node_count": 1, "max_nodes": 2}


def test_an_api_pool_adopts_the_node_its_selector_picks(
    api, attach, gpu_cluster, django_capture_on_commit_callbacks
):
    cluster = attach(gpu_cluster)
    gpu_cluster.patch_merge("v1", "Node", "gpu-b", {"metadata": {"labels": {"zone": "b"}}})
    body = {**POOL, "cluster": cluster.pk, "driver_release": "580.105.08", "node_selector": {"zone": "b"}}
    with django_capture_on_commit_callbacks(execute=True):  # the reconcile task
        answer = api.post("/api/v1/node-pools/", body, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["node_selector"] == {"zone": "b"}
    pool = NodePool.objects.get(pk=answer.json()["id"])
    assert pool.status == "ready" and [n.name for n in pool.nodes.all()] == ["gpu-b"]


@pytest.mark.parametrize(
    ("selector", "code"), [({"zone": "b"}, "invalid"), ({"bad key!": "x"}, "invalid_label")]
)
def test_a_bad_or_misplaced_selector_is_refused_naming_the_field(
    api, attach, gpu_cluster, make_cluster, owner, selector, code
):
    attached = attach(gpu_cluster)
    provisioned = make_cluster(owner.memberships.get().tenant, "managed")
    cluster = provisioned if code == "invalid" else attached
    body = {**POOL, "cluster": cluster.pk, "driver_release": "580.105.08", "node_selector": selector}
    answer = api.post("/api/v1/node-pools/", body, format="json")
    assert answer.status_code == 400, answer.json()
    assert (answer.json()["code"], answer.json()["details"]["field"]) == (code, "node_selector")
    assert not NodePool.objects.exists()


def test_the_pool_form_offers_a_node_selector_only_on_an_attached_cluster(
    client, owner, attach, gpu_cluster, make_cluster, django_capture_on_commit_callbacks
):
    client.force_login(owner)
    cluster = attach(gpu_cluster)
    managed = make_cluster(owner.memberships.get().tenant, "managed")
    assert b'name="node_selector"' not in client.get(f"/clusters/{managed.pk}/pools/new/").content
    gpu_cluster.patch_merge("v1", "Node", "gpu-c", {"metadata": {"labels": {"zone": "c", "team": "ml"}}})
    form = {
        **POOL,
        "driver_release": "580.105.08",
        "min_nodes": 0,
        "sharing_mode": "exclusive",
        "node_selector": "zone=c, team=ml",
    }
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(f"/clusters/{cluster.pk}/pools/new/", form)
    assert answer.status_code == 302, answer.content.decode()[-2000:]
    pool = NodePool.objects.get(cluster=cluster)
    assert pool.node_selector == {"zone": "c", "team": "ml"}
    assert [n.name for n in pool.nodes.all()] == ["gpu-c"]
    refused = client.post(
        f"/clusters/{cluster.pk}/pools/new/", {**form, "name": "other", "node_selector": "zone"}
    )
    assert refused.status_code == 400 and b"is not key=value" in refused.content
