"""Claim groups in the dashboard: a cluster's groups listed (linked from its claims), a group's page
showing each member on the topology (node, NVLink domain, rack, zone) or why the group holds nothing,
linked from its members' pages; another tenant's group is 404; the claim form marks a claim
non-preemptible."""

import re

import pytest

from claims.allocator.groups import create_group
from claims.models import Claim, ClaimGroup
from nodepools.models import Node
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

from .helpers import text
from .test_claims import FRACTION

pytestmark = pytest.mark.django_db
# node -> (NVLink clique, rack, zone): two nodes in clique A, one in clique B
TOPOLOGY = {
    0: ("nvl-a", "r1", "us-east-1a"),
    1: ("nvl-a", "r1", "us-east-1a"),
    2: ("nvl-b", "r2", "us-east-1b"),
}


@pytest.fixture
def cluster(tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, name="train", nodes=3, gpus_per_node=4)
    reconcile(pool.pk)
    for i, node in enumerate(Node.objects.filter(pool=pool).order_by("name")):
        clique, rack, zone = TOPOLOGY[i]
        node.labels = {
            **node.labels,
            "nvidia.com/gpu.clique": clique,
            "topology.kubernetes.io/rack": rack,
            "topology.kubernetes.io/zone": zone,
        }
        node.save(update_fields=["labels"])
    return cluster


def gang(tenant, cluster, name: str, members: int = 2) -> ClaimGroup:
    return create_group(
        context=TenantContext(tenant, "owner"),
        cluster=cluster,
        name=name,
        members=members,
        min_members=members,
        kind="whole",
        gpus=4,
    )


def cells(html: str, marker: str) -> list[str]:
    row = html.split(marker)[1].split("</tr>")[0]
    return [
        " ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    ]


def test_a_groups_page_shows_its_members_on_the_topology(ui, tenant, cluster):
    llm = gang(tenant, cluster, "llm")
    stuck = gang(tenant, cluster, "stuck")  # one node of 4 GPUs is left: it holds nothing

    listed = text(ui.get(f"/clusters/{cluster.pk}/groups/"))
    assert cells(listed, f'data-group-row="{llm.pk}"') == ["default", "llm", "placed", "2 of 2", "2", "0"]
    assert cells(listed, f'data-group-row="{stuck.pk}"')[2:4] == ["waiting, holding nothing", "0 of 2"]
    assert f'href="/clusters/{cluster.pk}/groups/"' in text(ui.get(f"/clusters/{cluster.pk}/claims/"))

    page = text(ui.get(f"/groups/{llm.pk}/"))
    assert "2 of 2 members (its minimum is 2)" in page
    assert "NVLink domains</dt><dd data-group-spread>1: nvl-a" in page  # the tightest domain holding both
    nodes = set()
    for member in ("llm-0", "llm-1"):
        status, node, clique, rack, zone, gpus = cells(page, f'data-member="{member}"')[1:]
        assert (status, clique, rack, zone, gpus) == ("allocated", "nvl-a", "r1", "us-east-1a", "0, 1, 2, 3")
        nodes.add(node)
    assert len(nodes) == 2

    waiting = text(ui.get(f"/groups/{stuck.pk}/"))
    assert "Waiting, holding nothing" in waiting
    assert "Group default/stuck holds nothing" in waiting and "it lacks room for 1" in waiting
    assert cells(waiting, 'data-member="stuck-0"')[1:3] == ["pending", "-"]

    member = Claim.objects.get(name="llm-0")
    assert f'<a href="/groups/{llm.pk}/">default/llm</a>' in text(ui.get(f"/claims/{member.pk}/"))


def test_another_tenants_group_is_404(ui, make_member, make_cluster, make_pool):
    other = make_member("globex", "owner").memberships.get().tenant
    theirs = make_cluster(other, "secret-cluster")
    reconcile(make_pool(theirs, nodes=1, gpus_per_node=4).pk)
    group = gang(other, theirs, "secret", members=1)
    assert ui.get(f"/groups/{group.pk}/").status_code == 404
    assert ui.get(f"/clusters/{theirs.pk}/groups/").status_code == 404


def test_the_claim_form_marks_a_claim_never_to_be_preempted(ui, tenant, cluster):
    fields = {**FRACTION, "kind": "whole", "gpu_memory": "", "compute_percent": ""}
    ui.post(f"/clusters/{cluster.pk}/claims/new/", {**fields, "name": "keep", "non_preemptible": "on"})
    ui.post(f"/clusters/{cluster.pk}/claims/new/", {**fields, "name": "take"})
    assert dict(Claim.objects.values_list("name", "preemptible")) == {"keep": False, "take": True}
