"""The audit log reads as people speak: who (a person, a token, or a named control loop: an upgrade run,
the rescaler, GPU health, the autoscaler) did what to which object, with a link, and the claims the
allocator moved on its own are in it."""

import pytest
from django.test import Client

from audit.context import acting_as
from audit.models import AuditEntry
from claims.allocator import create_claim
from claims.allocator.service import evict_claims
from claims.models import Claim
from nodepools.models import Node
from nodepools.nodes import set_cordons
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant(owner):
    return owner.memberships.get().tenant


@pytest.fixture
def placed(tenant, make_cluster, make_pool):
    """A claim on one of two one-GPU nodes of a simulated cluster."""
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, name="l4", gpu_model="l4", nodes=2, gpus_per_node=1)
    reconcile(pool.pk)
    return create_claim(context=TenantContext(tenant, "owner"), cluster=cluster, name="train", kind="whole")


def test_a_claim_a_drain_moves_is_recorded_as_the_runs_move(placed):
    left = placed.allocation.node
    other = Node.objects.exclude(pk=left.pk).get()
    set_cordons(placed.cluster_id, {left.pk: True})

    with acting_as("upgrade run 7"):
        evict_claims(placed.cluster_id, [placed.pk])

    entry = AuditEntry.objects.get(object_type="claims.claim", action="update")
    assert (entry.actor, entry.changes) == ("upgrade run 7", {"node": [left.name, other.name]})


def test_a_claim_taken_back_with_nowhere_to_go_is_recorded_as_waiting(placed):
    set_cordons(placed.cluster_id, {node.pk: True for node in Node.objects.all()})
    with acting_as("gpu health"):
        evict_claims(placed.cluster_id, [placed.pk])
    entry = AuditEntry.objects.get(object_type="claims.claim", action="update")
    assert entry.actor == "gpu health" and entry.changes["node"][1] is None
    assert Claim.objects.get(pk=placed.pk).status == "pending"


def test_the_audit_page_says_who_did_what_to_which_object_and_filters(placed, owner):
    other = Node.objects.exclude(pk=placed.allocation.node_id).get()
    set_cordons(placed.cluster_id, {placed.allocation.node_id: True})
    with acting_as("upgrade run 7"):
        evict_claims(placed.cluster_id, [placed.pk])
    browser = Client()
    browser.force_login(owner)

    page = " ".join(browser.get("/account/audit/").content.decode().split())
    assert f'upgrade run 7</a> moved claim <a href="/claims/{placed.pk}/">default/train</a>' in page
    assert f"node: {placed.allocation.node.name} → {other.name}" in page
    assert "tenant:" not in page and "tenant_id" not in page  # what says nothing to a reader

    only_runs = browser.get("/account/audit/", {"actor": "upgrade run 7"})
    assert {entry.actor for entry in only_runs.context["page"]} == {"upgrade run 7"}
    created = browser.get("/account/audit/", {"action": "create", "object_type": "claims.claim"})
    assert [e.object_repr for e in created.context["page"]] == ["default/train"]
    refused = browser.get("/account/audit/", {"since": "yesterday"})
    assert refused.status_code == 200 and "since:" in refused.content.decode()
    assert list(refused.context["page"]) == []


def test_references_and_kinds_read_as_names_not_ids(placed, owner):
    pool = placed.allocation.node.pool
    AuditEntry.objects.create(
        tenant=pool.tenant,
        actor="alice",
        action="update",
        object_type="nodepools.claim",
        object_id=str(placed.pk),
        object_repr="default/old",
        changes={"pool_id": [None, pool.pk]},
    )  # fmt: skip  — an entry from before claims left the nodepools app
    AuditEntry.objects.create(
        tenant=pool.tenant, actor="alice", action="update", object_type="claims.claim",
        object_id=str(placed.pk), object_repr="default/train", changes={"pool_id": [pool.pk, 999999]},
    )  # fmt: skip
    browser = Client()
    browser.force_login(owner)
    page = " ".join(browser.get("/account/audit/").content.decode().split())
    assert (
        f"pool: – → {pool}" in page  # its cluster/name, not its id
        and f"pool: {pool} → node pool #999999 (deleted)" in page
    )
    assert '<option value="claims.claim">claim</option>' in page
    assert '<option value="nodepools.claim">claim</option>' in page and "pool_id" not in page
