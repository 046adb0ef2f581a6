"""A new claim's placement: the holder of a cluster's allocation lock places every claim committed and not
yet tried with its own, and a claim that found the lock held waits for that holder without ever holding
the lock (`nvke_allocation_try`, `nvke_claim_after_holder`, driven here over real connections)."""

import threading

import psycopg
import pytest

from claims.allocator import create_claim, service
from claims.allocator.locks import LOCK_NAMESPACE
from claims.allocator.rows import claims_by_pk
from claims.models import Claim
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

from ...integration.processes import database_url_of_this_run

pytestmark = pytest.mark.postgresql(
    "the claims placed with a new one and the wait for the lock's holder are PostgreSQL functions; on "
    "SQLite each claim is placed alone under a thread lock"
)


@pytest.fixture
def cluster(owner, make_cluster, make_pool):
    cluster = make_cluster(owner.memberships.get().tenant, "prod")
    reconcile(make_pool(cluster, name="whole", gpu_model="h100-sxm5-80gb", nodes=1, gpus_per_node=8).pk)
    return cluster


def new_claim(cluster, name: str, *, place: bool, gpus: int = 1) -> Claim:
    context = TenantContext(cluster.tenant, "owner")
    return create_claim(context=context, cluster=cluster, name=name, kind="whole", gpus=gpus, place=place)


@pytest.mark.django_db
def test_a_claim_places_the_claims_queued_before_it_in_the_same_pass(cluster):
    queued = [new_claim(cluster, f"queued-{i}", place=False) for i in range(3)]
    assert all(c.status == "pending" and c.pending_reason == "" for c in queued)
    placed = new_claim(cluster, "now", place=True)
    assert placed.status == "allocated"
    assert set(Claim.objects.filter(status="allocated").values_list("name", flat=True)) == {
        "now",
        "queued-0",
        "queued-1",
        "queued-2",
    }


@pytest.mark.django_db
def test_the_claim_asking_now_is_placed_ahead_of_older_queued_ones(cluster):
    older = new_claim(cluster, "older", place=False, gpus=8)
    placed = new_claim(cluster, "now", place=True, gpus=8)
    assert placed.status == "allocated"
    older.refresh_from_db()
    assert older.status == "pending" and older.pending_reason  # tried in the same pass, and says why


@pytest.mark.django_db
def test_the_claims_a_pass_reads_are_the_ones_the_orm_reads(cluster):
    queued = new_claim(cluster, "queued", place=False)
    Claim.objects.filter(pk=queued.pk).update(allowed_models=["h100-sxm5-80gb"], priority=3, training=True)
    placed = new_claim(cluster, "now", place=True)
    read, orm = claims_by_pk([queued.pk, placed.pk]), Claim.objects.in_bulk([queued.pk, placed.pk])
    assert read.keys() == orm.keys()
    for pk, claim in read.items():
        for field in Claim._meta.concrete_fields:  # decoded alike: the JSON list, timestamps with zones
            assert getattr(claim, field.attname) == getattr(orm[pk], field.attname), field.name
    assert read[queued.pk].allowed_models == ["h100-sxm5-80gb"] and read[placed.pk].allocated_at
    assert not read[placed.pk]._state.adding  # saved as an existing row, as the ORM's are


def after_holder(conn: psycopg.Connection, cluster_id: int, claim_id: int) -> list[tuple]:
    sql = "SELECT status, pending_reason FROM nvke_claim_after_holder(%s, %s, %s)"
    return conn.execute(sql, [LOCK_NAMESPACE, cluster_id, claim_id]).fetchall()


def try_lock(conn: psycopg.Connection, cluster_id: int) -> list[tuple]:
    return conn.execute(
        "SELECT * FROM nvke_allocation_try(%s, %s, NULL, 0, 64)", [LOCK_NAMESPACE, cluster_id]
    ).fetchall()


def waiting_for_a_lock(observer: psycopg.Connection, pid: int) -> bool:
    row = observer.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [pid]).fetchone()
    return row[0] > 0


@pytest.fixture
def connections(transactional_db):
    """The lock's holder, a claim's waiter and an observer, each its own session."""
    opened = [psycopg.connect(database_url_of_this_run()) for _ in range(3)]
    opened[2].autocommit = True
    yield opened
    for conn in opened:
        conn.close()


def untried(cluster) -> Claim:
    """A claim committed and not yet tried (no placement pass queued: the test runs every task eagerly)."""
    return Claim.objects.create(tenant=cluster.tenant, cluster=cluster, name="waits", kind="whole")


def wait_for_the_holder(connections, cluster, claim, tried_by_holder: bool) -> list[tuple]:
    holder, waiter, observer = connections
    # The holder is told which claims wait untried.
    assert [row[1:3] for row in try_lock(holder, cluster.pk)] == [("holder", None), ("untried", claim.pk)]
    assert try_lock(waiter, cluster.pk) == []  # held: answered at once
    waiter.rollback()
    answer = []
    thread = threading.Thread(target=lambda: answer.extend(after_holder(waiter, cluster.pk, claim.pk)))
    thread.start()
    while not waiting_for_a_lock(observer, waiter.info.backend_pid):  # until it waits on the holder
        assert thread.is_alive(), answer
    if tried_by_holder:
        holder.execute(
            "UPDATE nodepools_claim SET pending_reason = 'No node fits.' WHERE id = %s", [claim.pk]
        )
    holder.commit()
    thread.join(timeout=30)
    assert not thread.is_alive()
    # The waiter holds nothing, its transaction still open: the lock is free for another session.
    assert try_lock(observer, cluster.pk)[0][1] == "holder"
    return answer


def test_a_claim_the_holder_tried_is_answered_when_it_commits(connections, cluster):
    claim = untried(cluster)
    assert wait_for_the_holder(connections, cluster, claim, tried_by_holder=True) == [
        ("pending", "No node fits.")
    ]


def test_a_claim_the_holder_left_untried_is_answered_as_it_was(connections, cluster):
    claim = untried(cluster)
    assert wait_for_the_holder(connections, cluster, claim, tried_by_holder=False) == [("pending", "")]


@pytest.mark.django_db
def test_a_holder_whose_own_claim_was_tried_meanwhile_places_the_others(cluster):
    """Between its wait and its turn another holder tried this process's claim: it places the rest."""
    mine = new_claim(cluster, "mine", place=False)
    Claim.objects.filter(pk=mine.pk).update(pending_reason="No node fits.")
    theirs = new_claim(cluster, "theirs", place=False)
    assert service._place_if_free(mine) is None
    theirs.refresh_from_db()
    assert theirs.status == "allocated"


@pytest.mark.django_db
def test_a_claim_deleted_while_it_waited_is_said_to_be_gone(cluster):
    claim = new_claim(cluster, "gone", place=False)
    Claim.objects.filter(pk=claim.pk).delete()
    with pytest.raises(Claim.DoesNotExist):
        service._wait_for_placement(claim)
