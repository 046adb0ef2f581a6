"""A PostgreSQL function that takes a cluster's allocation lock and returns the allocation log after a
given entry, in one round trip. Being VOLATILE, its query runs on a snapshot taken after the lock is
held, so it sees everything the previous holder committed. SQLite (the embedded default) needs none."""

from django.db import migrations

CREATE = """
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
DROP = "DROP FUNCTION IF EXISTS nvke_allocation_lock(integer, integer, bigint);"


def run(sql):
    def operation(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return operation


class Migration(migrations.Migration):
    dependencies = [("nodepools", "0003_allocation_log")]

    operations = [migrations.RunPython(run(CREATE), run(DROP))]
