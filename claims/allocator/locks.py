"""The allocator's lock, and the order locks are taken in.

A transaction that changes what is placed takes, in this order and never the reverse:
1. the row locks of what it acts for, if any: the tenant (`nvke.tenancy.quotas.lock_tenant`, when a
   quota applies), a node pool (its reconcile), an upgrade run (its tick);
2. the cluster's allocation lock (`allocation_lock`), held until commit;
3. under it, the rows only the allocator writes: claims' status, allocations, GPU shares, the
   allocation log; and node and GPU rows, through `nodepools.nodes`.
So every placement in a cluster reads the inventory fresh inside the lock and writes in the same
transaction, and concurrent workers never over-commit a GPU."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

from claims.allocator import sql
from claims.allocator.inventory import CACHE

LOCK_NAMESPACE = 0x4E564B45  # "NVKE": advisory-lock key space of the allocator
# SQLite (the embedded default) is one process: a thread lock suffices. Re-entrant, because on-commit
# callbacks (an eager placement pass after a release) run before the lock is let go.
_sqlite_lock = threading.RLock()


@contextmanager
def allocation_lock(cluster_id: int) -> Iterator[None]:
    """A transaction holding the cluster's allocation lock until it commits. If it rolls back, this
    process's in-memory inventory of the cluster may hold changes that never happened: drop it."""
    with _locked(cluster_id, sql.LOCK, []):
        yield


@contextmanager
def allocation_lock_if_free(cluster_id: int, claim_id: int, up_to: int) -> Iterator[list[int] | None]:
    """A transaction holding the cluster's allocation lock, as `allocation_lock`, when it is free; it
    gives the ids of up to `up_to` claims committed and not yet tried (`claim_id` first if it is one).
    None at once when another transaction holds the lock."""
    if connection.vendor != "postgresql":  # SQLite: one process, whose claims never wait for the lock
        with allocation_lock(cluster_id):
            yield [claim_id]
        return
    with _locked(cluster_id, sql.LOCK_IF_FREE, [claim_id, up_to]) as rows:
        if not rows:
            yield None
            return
        untried = [claim for _, kind, claim, _ in rows if kind == "untried"]
        del rows[: 1 + len(untried)]  # the rest is the log, which the snapshot reads
        yield untried


def claim_after_holder(cluster_id: int, claim_id: int) -> tuple | None:
    """Wait for the allocation lock's holder to commit, holding nothing (`nvke_claim_after_holder`); then
    the claim's (status, pending reason, allocated at), None if it is gone."""
    with connection.cursor() as cursor:
        cursor.execute(sql.CLAIM_AFTER_HOLDER, [LOCK_NAMESPACE, cluster_id, claim_id])
        return cursor.fetchone()


@contextmanager
def _locked(cluster_id: int, statement: str, params: list) -> Iterator[list[tuple]]:
    try:
        if connection.vendor == "postgresql":
            # Inside a caller's transaction, join it: no savepoint round trips while the lock is held.
            # An error in here fails that whole transaction, as it propagates anyway.
            with transaction.atomic(savepoint=False):
                # One round trip: the lock, and the log entries this process's snapshot has not seen.
                snap = CACHE.snapshots.get(cluster_id)
                after = snap.last_event if snap else None
                with connection.cursor() as cursor:
                    cursor.execute(statement, [LOCK_NAMESPACE, cluster_id, after, *params])
                    rows = cursor.fetchall()
                CACHE.log_tails[cluster_id] = (after, rows)
                yield rows
        else:
            with _sqlite_lock, transaction.atomic(savepoint=False):
                yield []
    except BaseException:
        CACHE.forget(cluster_id)
        raise
    finally:
        CACHE.log_tails.pop(cluster_id, None)
