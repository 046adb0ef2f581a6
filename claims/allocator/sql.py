"""The allocator's SQL, PostgreSQL only (SQLite, the embedded default, takes the ORM and a thread lock):
the functions its lock is taken through, which the nodepools migrations create, and the statements it
runs by hand.

The functions' text is the migrations' own: migrations 0004 and 0017 load it from here, so keep each
constant as the migration that uses it was written. A new version of a function is a new constant and a
new migration, never an edit of one below (a database migrated before would keep the old function, and
one migrated after would get the new one without a migration saying so).

The allocation log and the claims are `claims` models whose tables kept the nodepools names
(`nodepools_allocationevent`, `nodepools_claim`)."""

# --- functions, created by the migrations ----------------------------------------------------------------

# Migration 0004. Takes a cluster's allocation lock and returns the allocation log after a given entry, in
# one round trip. Being VOLATILE, its query runs on a snapshot taken after the lock is held, so it sees
# everything the previous holder committed.
ALLOCATION_LOCK_0004 = """
CREATE OR REPLACE FUNCTION nvke_allocation_lock(namespace integer, cluster integer, after bigint)
RETURNS TABLE (id bigint, kind text, claim_id bigint, placement jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(namespace, cluster);
    IF after IS NOT NULL THEN
        RETURN QUERY
            SELECT e.id, e.kind::text, e.claim_id, e.placement
            FROM nodepools_allocationevent e
            WHERE e.cluster_id = cluster AND e.id > after
            ORDER BY e.id;
    END IF;
END
$$;
"""
DROP_ALLOCATION_LOCK_0004 = "DROP FUNCTION IF EXISTS nvke_allocation_lock(integer, integer, bigint);"

# Migration 0017: a new claim's placement, each one round trip.
#
# `nvke_allocation_try` takes the cluster's allocation lock if it is free, and then returns a row that
# says so, the claims committed and not yet tried (pending with no reason: the given claim first, then by
# priority and age, at most `up_to`), and the allocation log after a given entry, as
# `nvke_allocation_lock` does. It returns no rows at all when another transaction holds the lock.
#
# `nvke_claim_after_holder` waits until the lock's holder commits and returns the claim as that holder
# left it (status, pending reason, allocated at; no row if it is gone). It waits for a shared lock on the
# same key, which every waiter is granted together when the holder commits, in a subtransaction rolled
# back at once: that lets the shared lock go there and then (an interrupt rolls it back too, so it is
# never left held), and it never holds the allocation lock. A request for the allocation lock conflicts
# with the waiters queued before it, so waiters are not starved.
PLACEMENT_FUNCTIONS_0017 = """
CREATE OR REPLACE FUNCTION nvke_allocation_try(
    namespace integer, cluster integer, after bigint, claim bigint, up_to integer
)
RETURNS TABLE (id bigint, kind text, claim_id bigint, placement jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(namespace, cluster) THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT NULL::bigint, 'holder'::text, NULL::bigint, NULL::jsonb;
    RETURN QUERY
        SELECT NULL::bigint, 'untried'::text, c.id, NULL::jsonb
        FROM nodepools_claim c
        WHERE c.cluster_id = cluster AND c.status = 'pending' AND c.pending_reason = ''
        ORDER BY c.id <> claim, c.priority DESC, c.created_at
        LIMIT up_to;
    IF after IS NOT NULL THEN
        RETURN QUERY
            SELECT e.id, e.kind::text, e.claim_id, e.placement
            FROM nodepools_allocationevent e
            WHERE e.cluster_id = cluster AND e.id > after
            ORDER BY e.id;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION nvke_claim_after_holder(namespace integer, cluster integer, claim bigint)
RETURNS TABLE (status text, pending_reason text, allocated_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    BEGIN
        PERFORM pg_advisory_xact_lock_shared(namespace, cluster);
        RAISE SQLSTATE 'P0001';
    EXCEPTION WHEN SQLSTATE 'P0001' THEN NULL;
    END;
    -- A new snapshot (VOLATILE): what the holder committed.
    RETURN QUERY
        SELECT c.status::text, c.pending_reason, c.allocated_at FROM nodepools_claim c WHERE c.id = claim;
END
$$;
"""
DROP_PLACEMENT_FUNCTIONS_0017 = """
DROP FUNCTION IF EXISTS nvke_allocation_try(integer, integer, bigint, bigint, integer);
DROP FUNCTION IF EXISTS nvke_claim_after_holder(integer, integer, bigint);
"""

# --- statements the allocator runs (claims/allocator/locks.py, rows.py) --------------------------------

# Parameters: the lock's namespace, the cluster, the last log entry the process has seen (or NULL).
LOCK = "SELECT * FROM nvke_allocation_lock(%s, %s, %s)"
# ... and the claim that asks, and how many untried claims to take at most.
LOCK_IF_FREE = "SELECT * FROM nvke_allocation_try(%s, %s, %s, %s, %s)"
# The lock's namespace, the cluster, the claim.
CLAIM_AFTER_HOLDER = "SELECT * FROM nvke_claim_after_holder(%s, %s, %s)"

# A placement pass's rows in one statement (data-modifying CTEs fed by JSON): allocations, GPU shares,
# metering intervals, the claims' new status and the log entries; the last entry's id comes back.
WRITE_PASS = """
WITH a_rows AS (
    SELECT * FROM jsonb_to_recordset(%(allocations)s::jsonb) AS r(
        claim_id bigint, node_id bigint, isolation text, cpu_milli integer, host_memory_mib integer)
), a AS (
    INSERT INTO nodepools_allocation (claim_id, node_id, isolation, cpu_milli, host_memory_mib, created_at)
    SELECT claim_id, node_id, isolation, cpu_milli, host_memory_mib, %(now)s FROM a_rows
    RETURNING id, claim_id
), s AS (
    INSERT INTO nodepools_gpushare
        (allocation_id, gpu_id, memory_mib, compute_milli, guaranteed_milli, exclusive, mig_profile,
         mig_start, mig_size)
    SELECT a.id, r.gpu_id, r.memory_mib, r.compute_milli, r.guaranteed_milli, r.exclusive, r.mig_profile,
        r.mig_start, r.mig_size
    FROM jsonb_to_recordset(%(shares)s::jsonb) AS r(
        claim_id bigint, gpu_id bigint, memory_mib integer, compute_milli integer, guaranteed_milli integer,
        exclusive boolean, mig_profile text, mig_start integer, mig_size integer)
    JOIN a ON a.claim_id = r.claim_id
), m AS (
    INSERT INTO nodepools_usageinterval
        (tenant_id, allocation_id, claim_id, claim_name, namespace, kind, cluster_id, cluster_name, pool_id,
         pool_name, gpu_model, gpus, memory_mib, guaranteed_milli, ceiling_milli, gpu_equivalent_milli,
         started_at)
    SELECT r.tenant_id, a.id, r.claim_id, r.claim_name, r.namespace, r.kind, r.cluster_id, r.cluster_name,
        r.pool_id, r.pool_name, r.gpu_model, r.gpus, r.memory_mib, r.guaranteed_milli, r.ceiling_milli,
        r.gpu_equivalent_milli, %(now)s
    FROM jsonb_to_recordset(%(usage)s::jsonb) AS r(
        claim_id bigint, tenant_id bigint, claim_name text, namespace text, kind text, cluster_id bigint,
        cluster_name text, pool_id bigint, pool_name text, gpu_model text, gpus integer, memory_mib integer,
        guaranteed_milli integer, ceiling_milli integer, gpu_equivalent_milli integer)
    JOIN a ON a.claim_id = r.claim_id
), u AS (
    UPDATE nodepools_claim c
    SET status = r.status, pending_reason = r.reason, allocated_at = r.allocated_at
    FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS r(
        claim_id bigint, status text, reason text, allocated_at timestamptz)
    WHERE c.id = r.claim_id
), e AS (
    INSERT INTO nodepools_allocationevent (cluster_id, kind, claim_id, placement, created_at)
    SELECT %(cluster)s, 'add', r.claim_id, r.placement, %(now)s
    FROM jsonb_to_recordset(%(log)s::jsonb) AS r(n integer, claim_id bigint, placement jsonb)
    ORDER BY n
    RETURNING id
)
SELECT max(id) FROM e
"""
