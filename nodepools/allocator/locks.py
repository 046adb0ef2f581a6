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

from .inventory import CACHE

LOCK_NAMESPACE = 0x4E564B45  # "NVKE": advisory-lock key space of the allocator
# SQLite (the embedded default) is one process: a thread lock suffices. Re-entrant, because on-commit
# callbacks (an eager placement pass after a release) run before the lock is let go.
_sqlite_lock = threading.RLock()


@contextmanager
def allocation_lock(cluster_id: int) -> Iterator[None]:
    """A transaction holding the cluster's allocation lock until it commits. If it rolls back, this
    process's in-memory inventory of the cluster may hold changes that never happened: drop it."""
    try:
        if connection.vendor == "postgresql":
            # Inside a caller's transaction, join it: no savepoint round trips while the lock is held.
            # An error in here fails that whole transaction, as it propagates anyway.
            with transaction.atomic(savepoint=False):
                # One round trip: the lock, and the log entries this process's snapshot has not seen.
                snap = CACHE.snapshots.get(cluster_id)
                after = snap.last_event if snap else None
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT * FROM nvke_allocation_lock(%s, %s, %s)", [LOCK_NAMESPACE, cluster_id, after]
                    )
                    CACHE.log_tails[cluster_id] = (after, cursor.fetchall())
                yield
        else:
            with _sqlite_lock, transaction.atomic(savepoint=False):
                yield
    except BaseException:
        CACHE.forget(cluster_id)
        raise
    finally:
        CACHE.log_tails.pop(cluster_id, None)
