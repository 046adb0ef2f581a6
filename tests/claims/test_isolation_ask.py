"""A claim's isolation ask: never placed below it, "any pool" tries the pools that isolate a fraction most
first, asks that no claim of its kind can get are 400 naming the field, and a move that changes the GPU
model or the isolation says so in the audit log and on the claim's page."""

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEntry
from claims.allocator import create_claim, evict_node, moves
from claims.models import Claim
from nodepools.models import Node
from nodepools.nodes import set_cordons
from nodepools.services import reconcile
from nvke.errors import DomainError
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(owner, make_cluster, make_pool):
    """A time-slicing A10 pool (named first, so tried first by name) and an MPS L4 pool."""
    cluster = make_cluster(owner.memberships.get().tenant, "mixed")
    for name, model, mode in (("a-shared", "a10", "time-slicing"), ("b-mps", "l4", "mps")):
        reconcile(make_pool(cluster, name=name, gpu_model=model, sharing_mode=mode, nodes=1).pk)
    return cluster


def context(owner) -> TenantContext:
    return TenantContext(owner.memberships.get().tenant, "owner")


def fraction(owner, cluster, name: str, **fields) -> Claim:
    return create_claim(
        context=context(owner), cluster=cluster, name=name, kind="fraction", compute_percent=20, **fields
    )


def pool_of(claim: Claim) -> str:
    return Claim.objects.get(pk=claim.pk).allocation.node.pool.name


def test_any_pool_tries_the_pool_that_holds_a_fractions_memory_first(owner, cluster):
    assert pool_of(fraction(owner, cluster, "plain")) == "b-mps"


def test_a_claim_is_never_placed_below_its_isolation(owner, cluster):
    set_cordons(cluster.pk, {Node.objects.get(pool__name="b-mps").pk: True})
    asked = fraction(owner, cluster, "held", min_isolation="memory-capped")
    assert asked.status == "pending" and "isolation below the claim's" in asked.pending_reason
    assert pool_of(fraction(owner, cluster, "any")) == "a-shared"  # without the ask it lands there


@pytest.mark.parametrize(
    "kind, fields, isolation",
    [
        ("fraction", {"compute_percent": 20}, "hard"),
        ("mig", {"mig_profile": "1g.10gb"}, "exclusive"),
        ("fraction", {"compute_percent": 20}, "sealed"),
    ],
)
def test_an_isolation_no_claim_of_its_kind_gets_is_refused(owner, cluster, kind, fields, isolation):
    with pytest.raises(DomainError) as refused:
        create_claim(
            context=context(owner), cluster=cluster, name="x", kind=kind, min_isolation=isolation, **fields
        )
    assert refused.value.field == "min_isolation"
    assert not Claim.objects.filter(name="x").exists()


def test_the_api_takes_and_shows_the_ask(owner, cluster):
    api = APIClient()
    api.force_authenticate(owner)
    body = {"cluster": cluster.pk, "name": "api", "kind": "fraction", "compute_percent": 20}
    made = api.post("/api/v1/claims/", {**body, "min_isolation": "memory-capped"}, format="json")
    assert made.status_code == 201 and made.json()["min_isolation"] == "memory-capped"
    refused = api.post("/api/v1/claims/", {**body, "name": "b", "min_isolation": "hard"}, format="json")
    assert refused.status_code == 400 and refused.json()["details"]["field"] == "min_isolation"


def test_a_move_onto_another_model_and_isolation_is_recorded_and_shown(owner, cluster, client):
    claim = fraction(owner, cluster, "mover")
    before = moves.nodes_of([claim.pk])
    assert before[claim.pk].isolation == "memory-capped"
    mps_node = Node.objects.get(pool__name="b-mps")
    set_cordons(cluster.pk, {mps_node.pk: True})  # a drain: cordon, then move its claims
    assert evict_node(cluster.pk, mps_node.pk) == (1, 1)
    entry = AuditEntry.objects.filter(object_type="claims.claim", object_id=str(claim.pk)).latest("id")
    assert entry.changes["node"][0] == mps_node.name
    assert entry.changes["gpu_model"] == [before[claim.pk].gpu_model, "A10 24GB"]
    assert entry.changes["isolation"] == ["memory-capped", "none"]
    client.force_login(owner)
    page = client.get(f"/claims/{claim.pk}/").content.decode()
    assert "data-claim-moves" in page and "its GPU model and isolation changed" in page


def test_a_move_that_keeps_model_and_isolation_records_the_node_alone():
    before, after = moves.Where("n1", "L4 24GB", "none"), moves.Where("n2", "L4 24GB", "none")
    assert moves.move_changes(before, after) == {"node": ["n1", "n2"]}
    assert moves.move_changes(before, None) == {"node": ["n1", None]}
    assert moves.move_changes(before, before) == {}


def test_a_drained_claim_keeps_its_gpu_model_where_it_can(owner, make_cluster, make_pool):
    """Three MPS pools, by name: A10, L4, A10. A claim on the first A10 that a drain moves goes to the
    other A10 pool, not to the L4 that comes first by name, and the drain preview says the same."""
    cluster = make_cluster(owner.memberships.get().tenant, "models")
    for name, model in (("a-a10", "a10"), ("b-l4", "l4"), ("c-a10", "a10")):
        reconcile(make_pool(cluster, name=name, gpu_model=model, sharing_mode="mps", nodes=1).pk)
    claim = fraction(owner, cluster, "stays")
    assert pool_of(claim) == "a-a10"
    node = Node.objects.get(pool__name="a-a10")
    set_cordons(cluster.pk, {node.pk: True})
    from claims.allocator import drain_preview

    (outcome,) = drain_preview(cluster.pk, [node.pk])[node.pk]
    assert outcome.to_node == Node.objects.get(pool__name="c-a10").name
    evict_node(cluster.pk, node.pk)
    assert pool_of(claim) == "c-a10"
    entry = AuditEntry.objects.filter(object_type="claims.claim", object_id=str(claim.pk)).latest("id")
    assert set(entry.changes) == {"node"}  # same model, same isolation: a move and nothing more
