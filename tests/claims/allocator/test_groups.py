"""Claim groups (gangs) through the API: all or nothing, topology, minimum, moves, release, refusals,
tenancy."""

import pytest

from claims.allocator import drain_preview, evict_node, place_pending, plan_defrag, topology_changed
from claims.models import Claim, ClaimGroup
from nodepools.models import Node
from nodepools.services import reconcile

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(owner, make_cluster):
    return make_cluster(owner.memberships.get().tenant, "prod")


@pytest.fixture
def pool(cluster, make_pool):
    """Four 8-GPU H100 nodes: node 0 and 1 in NVLink domain A (rack r1), 2 and 3 in B (rack r2)."""
    made = make_pool(cluster, name="h100", gpu_model="h100-sxm5-80gb", nodes=4, gpus_per_node=8)
    reconcile(made.pk)
    nodes = list(Node.objects.filter(pool=made).order_by("name"))
    for node, clique, rack in zip(nodes, "AABB", ["r1", "r1", "r2", "r2"], strict=True):
        labels = {"nvidia.com/gpu.clique": f"cluster-1.{clique}", "topology.kubernetes.io/rack": rack}
        Node.objects.filter(pk=node.pk).update(labels={**node.labels, **labels})
    topology_changed(cluster.pk)
    return made


def group(api, cluster, name, members, gpus=8, **fields):
    template = {"kind": "whole", "gpus": gpus, **fields.pop("template", {})}
    body = {"cluster": cluster.pk, "name": name, "members": members, "template": template, **fields}
    return api.post("/api/v1/claim-groups/", body, format="json")


def claim(api, cluster, name, **fields):
    return api.post("/api/v1/claims/", {"cluster": cluster.pk, "name": name, **fields}, format="json")


def node_of(member: dict) -> str:
    return member["node"]


def test_group_is_placed_whole_within_one_nvlink_domain(api, cluster, pool):
    response = group(api, cluster, "llm", 2)
    assert response.status_code == 201, response.data
    data = response.data
    assert (data["status"], data["placed"], data["min_members"]) == ("placed", 2, 2)
    assert [m["name"] for m in data["claims"]] == ["llm-0", "llm-1"]
    assert all(m["status"] == "allocated" and len(m["gpus"]) == 8 for m in data["claims"])
    assert len({node_of(m) for m in data["claims"]}) == 2
    assert len({m["topology"]["nvlink"] for m in data["claims"]}) == 1


def test_group_goes_to_the_domain_that_still_holds_it_whole(api, cluster, pool):
    assert claim(api, cluster, "infer", kind="whole", gpus=1).data["status"] == "allocated"
    taken = Claim.objects.get(name="infer").allocation.node
    taken_clique = taken.labels["nvidia.com/gpu.clique"]
    data = group(api, cluster, "llm", 2).data
    assert data["status"] == "placed"
    cliques = {m["topology"]["nvlink"] for m in data["claims"]}
    assert cliques != {taken_clique} and len(cliques) == 1  # the whole other domain, not one node of each


def test_group_packs_onto_one_node_when_it_fits_there(api, cluster, pool):
    data = group(api, cluster, "small", 4, gpus=2).data
    assert data["status"] == "placed"
    assert len({node_of(m) for m in data["claims"]}) == 1


def test_group_that_cannot_fit_holds_nothing_and_says_what_it_lacks(api, cluster, pool):
    assert group(api, cluster, "a", 3).data["status"] == "placed"
    response = group(api, cluster, "b", 2)
    assert response.status_code == 201
    data = response.data
    assert (data["status"], data["placed"]) == ("pending", 0)
    assert all(m["status"] == "pending" and m["node"] is None for m in data["claims"])
    reason = data["pending_reason"]
    assert "Group default/b holds nothing" in reason
    assert "needs 2 members of 8 whole GPUs" in reason and "only 1 fit now" in reason
    assert "lacks room for 1" in reason
    assert not Claim.objects.filter(group__name="b", allocation__isnull=False).exists()


def test_pending_group_is_placed_as_a_unit_when_capacity_frees(api, cluster, pool):
    placed = group(api, cluster, "a", 3).data
    waiting = group(api, cluster, "b", 2).data
    assert waiting["status"] == "pending"
    assert api.delete(f"/api/v1/claim-groups/{placed['id']}/").status_code == 204
    assert not Claim.objects.filter(group_id=placed["id"]).exists()
    place_pending(cluster.pk)
    data = api.get(f"/api/v1/claim-groups/{waiting['id']}/").data
    assert (data["status"], data["placed"]) == ("placed", 2)


def test_group_at_its_minimum_places_what_fits_and_the_rest_wait(api, cluster, pool):
    assert claim(api, cluster, "big", kind="whole", gpus=8).data["status"] == "allocated"
    data = group(api, cluster, "elastic", 4, min_members=2).data
    assert (data["status"], data["placed"]) == ("placed", 3)
    (waiting,) = [m for m in data["claims"] if m["status"] == "pending"]
    assert "Group default/elastic is placed with 3 of its 4 members" in waiting["pending_reason"]


def test_draining_a_members_node_moves_the_whole_group_or_none_of_it(api, cluster, pool):
    data = group(api, cluster, "llm", 2).data
    nodes = {m["node"] for m in data["claims"]}
    # Fill the other domain, then drain one of the group's nodes: the group no longer fits whole.
    assert group(api, cluster, "other", 2).data["status"] == "placed"
    drained = Node.objects.get(name=sorted(nodes)[0])
    Node.objects.filter(pk=drained.pk).update(cordoned=True)
    topology_changed(cluster.pk)
    evict_node(cluster.pk, drained.pk)
    after = api.get(f"/api/v1/claim-groups/{data['id']}/").data
    assert (after["status"], after["placed"]) == ("pending", 0)  # not the one member left standing
    assert "holds nothing" in after["pending_reason"]


def test_a_member_is_not_released_alone(api, cluster, pool):
    data = group(api, cluster, "llm", 2).data
    response = api.delete(f"/api/v1/claims/{data['claims'][0]['id']}/")
    assert response.status_code == 409
    assert response.data["details"]["field"] == "group"
    assert Claim.objects.filter(group_id=data["id"], status="allocated").count() == 2


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"min_members": 3}, "min_members"),
        ({"members": 0}, "members"),
        ({"template": {"gpus": 9}}, "template"),
        ({"template": {"kind": "whole", "mig_profile": "1g.10gb"}}, "template.kind"),
        ({"name": "Bad_Name"}, "name"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, cluster, pool, fields, field):
    body = {"name": "llm", "members": 2, **fields}
    response = group(api, cluster, body.pop("name"), body.pop("members"), **body)
    assert response.status_code == 400, response.data
    text = str(response.data)
    assert field.split(".")[0] in text and (field.split(".")[-1] in text)


def test_a_duplicate_name_is_a_409(api, cluster, pool):
    assert group(api, cluster, "llm", 1).status_code == 201
    response = group(api, cluster, "llm", 1)
    assert response.status_code == 409 and response.data["details"]["field"] == "name"
    assert ClaimGroup.objects.filter(name="llm").count() == 1


def test_another_tenants_group_is_invisible(api, cluster, pool, make_member, client_for):
    data = group(api, cluster, "llm", 1).data
    stranger = client_for(make_member("globex", "owner"))
    assert stranger.get(f"/api/v1/claim-groups/{data['id']}/").status_code == 404
    assert stranger.delete(f"/api/v1/claim-groups/{data['id']}/").status_code == 404
    assert stranger.get("/api/v1/claim-groups/").data["results"] == []
    assert group(stranger, cluster, "theirs", 1).status_code == 400  # not their cluster


def test_drain_preview_says_when_a_drain_takes_a_group_below_its_minimum(api, cluster, pool):
    data = group(api, cluster, "llm", 2).data
    member_node = Node.objects.get(name=data["claims"][0]["node"])
    assert drain_preview(cluster.pk, [member_node.pk])[member_node.pk][0].to_node  # the other domain is free
    assert group(api, cluster, "other", 2).data["status"] == "placed"
    (outcome,) = drain_preview(cluster.pk, [member_node.pk])[member_node.pk]
    assert outcome.claim.name == data["claims"][0]["name"] and outcome.to_node == ""
    assert "Group default/llm holds nothing" in outcome.reason and "only 1 fit now" in outcome.reason
    assert Claim.objects.filter(group_id=data["id"], status="allocated").count() == 2  # a preview only


def test_defragmentation_never_moves_a_member_alone(api, cluster, make_pool):
    frac = make_pool(
        cluster,
        name="frac",
        gpu_model="l4",
        nodes=2,
        gpus_per_node=1,
        sharing_mode="fractional",
        placement_policy="spread",
    )
    reconcile(frac.pk)
    fraction = {"kind": "fraction", "gpu_memory": "1Gi", "pool": frac.pk}
    data = group(api, cluster, "small", 1, gpus=1, template={**fraction, "compute_percent": 20}).data
    big = claim(api, cluster, "big", **fraction, compute_percent=70).data
    assert data["claims"][0]["node"] != big["allocation"]["node_name"]  # spread: defrag has work
    moves, freed = plan_defrag(cluster.pk, 10)
    assert [m.claim for m in moves] == [big["id"]] and freed == 1  # the smaller member stays put


def test_members_past_the_minimum_are_placed_as_room_frees(api, cluster, pool):
    big = claim(api, cluster, "big", kind="whole", gpus=8).data
    data = group(api, cluster, "elastic", 4, min_members=2).data
    assert data["placed"] == 3
    assert api.delete(f"/api/v1/claims/{big['id']}/").status_code == 204
    place_pending(cluster.pk)
    after = api.get(f"/api/v1/claim-groups/{data['id']}/").data
    assert (after["status"], after["placed"], after["pending_reason"]) == ("placed", 4, "")
