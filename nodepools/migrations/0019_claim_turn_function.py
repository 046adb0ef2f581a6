"""`nvke_claim_turn` replaces `nvke_claim_after_holder`: a claim committed untried waits for its turn in
one round trip, where it took a wait and then a transaction to try the lock, for every holder it met.

Called in a transaction, it returns the claim as it stands once another holder of the allocation lock
has tried it — one row `tried` with its status, pending reason and allocated-at as JSON — or no row when
it is gone; or, holding the lock, the rows `nvke_allocation_try` gives its holder (the calling
transaction places the untried claims, its own first). Waiting holds nothing: it first waits for the
holder's commit on a shared lock (every waiter is granted it together) in a subtransaction rolled back
at once; a claim still untried then queues for the lock itself in a subtransaction kept only when the
claim is still untried once the lock is its own, so a waiter whose claim the holder before it placed
lets the lock go at once. Each look at the claim is a new snapshot (VOLATILE)."""

import importlib

from django.db import migrations

CREATE = """
-- A claim's state once tried ({} when it is gone); NULL while it waits untried.
CREATE OR REPLACE FUNCTION nvke_claim_tried(claim bigint) RETURNS jsonb
LANGUAGE sql VOLATILE AS $$
    SELECT CASE
        WHEN c.id IS NULL THEN '{}'::jsonb
        WHEN c.status = 'pending' AND c.pending_reason = '' THEN NULL
        ELSE jsonb_build_object(
            'status', c.status, 'pending_reason', c.pending_reason, 'allocated_at', c.allocated_at)
    END
    FROM (SELECT 1) AS one LEFT JOIN nodepools_claim c ON c.id = claim
$$;

-- What the allocation lock's new holder is given: a row that says so, the untried claims, the log.
CREATE OR REPLACE FUNCTION nvke_allocation_holder(cluster integer, after bigint, claim bigint, up_to integer)
RETURNS TABLE (id bigint, kind text, claim_id bigint, placement jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
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

CREATE OR REPLACE FUNCTION nvke_allocation_try(
    namespace integer, cluster integer, after bigint, claim bigint, up_to integer
)
RETURNS TABLE (id bigint, kind text, claim_id bigint, placement jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF pg_try_advisory_xact_lock(namespace, cluster) THEN
        RETURN QUERY SELECT * FROM nvke_allocation_holder(cluster, after, claim, up_to);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION nvke_claim_turn(
    namespace integer, cluster integer, after bigint, claim bigint, up_to integer
)
RETURNS TABLE (id bigint, kind text, claim_id bigint, placement jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    tried jsonb := nvke_claim_tried(claim);
BEGIN
    IF tried IS NULL THEN
        RETURN QUERY SELECT * FROM nvke_allocation_try(namespace, cluster, after, claim, up_to);
        IF FOUND THEN
            RETURN;
        END IF;
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(namespace, cluster);
            RAISE SQLSTATE 'P0001';
        EXCEPTION WHEN SQLSTATE 'P0001' THEN NULL;
        END;
        tried := nvke_claim_tried(claim);
    END IF;
    IF tried IS NULL THEN
        BEGIN
            PERFORM pg_advisory_xact_lock(namespace, cluster);
            tried := nvke_claim_tried(claim);
            IF tried IS NOT NULL THEN
                RAISE SQLSTATE 'P0001';
            END IF;
        EXCEPTION WHEN SQLSTATE 'P0001' THEN NULL;
        END;
    END IF;
    IF tried IS NULL THEN
        RETURN QUERY SELECT * FROM nvke_allocation_holder(cluster, after, claim, up_to);
    ELSIF tried <> '{}' THEN
        RETURN QUERY SELECT NULL::bigint, 'tried'::text, claim, tried;
    END IF;
END
$$;
DROP FUNCTION IF EXISTS nvke_claim_after_holder(integer, integer, bigint);
"""
DROP = """
DROP FUNCTION IF EXISTS nvke_claim_turn(integer, integer, bigint, bigint, integer);
DROP FUNCTION IF EXISTS nvke_allocation_try(integer, integer, bigint, bigint, integer);
DROP FUNCTION IF EXISTS nvke_allocation_holder(integer, bigint, bigint, integer);
DROP FUNCTION IF EXISTS nvke_claim_tried(bigint);
"""
previous = importlib.import_module("nodepools.migrations.0017_claim_placement_functions")


class Migration(migrations.Migration):
    dependencies = [("nodepools", "0018_claim_untried_index")]

    operations = [migrations.RunPython(previous.run(CREATE), previous.run(DROP + previous.CREATE))]
