"""PostgreSQL functions for a new claim's placement, each one round trip (SQLite needs none).

`nvke_allocation_try` takes the cluster's allocation lock if it is free, and then returns a row that
says so, the claims committed and not yet tried (pending with no reason: the given claim first, then by
priority and age, at most `up_to`), and the allocation log after a given entry, as
`nvke_allocation_lock` does. It returns no rows at all when another transaction holds the lock.

`nvke_claim_after_holder` waits until the lock's holder commits and returns the claim as that holder left
it (status, pending reason, allocated at; no row if it is gone). It waits for a shared
lock on the same key, which every waiter is granted together when the holder commits, in a
subtransaction rolled back at once: that lets the shared lock go there and then (an interrupt rolls it
back too, so it is never left held), and it never holds the allocation lock. A request for the
allocation lock conflicts with the waiters queued before it, so waiters are not starved."""

from django.db import migrations

CREATE = """
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
DROP = """
DROP FUNCTION IF EXISTS nvke_allocation_try(integer, integer, bigint, bigint, integer);
DROP FUNCTION IF EXISTS nvke_claim_after_holder(integer, integer, bigint);
"""


def run(sql):
    def operation(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return operation


class Migration(migrations.Migration):
    dependencies = [("nodepools", "0016_pool_upgrade_defaults")]

    operations = [migrations.RunPython(run(CREATE), run(DROP))]
