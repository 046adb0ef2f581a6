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
allocation lock conflicts with the waiters queued before it, so waiters are not starved.

The functions' text is claims.allocator.sql's, which keeps it as this migration was written."""

from django.db import migrations

from claims.allocator.sql import DROP_PLACEMENT_FUNCTIONS_0017, PLACEMENT_FUNCTIONS_0017


def run(sql):
    def operation(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return operation


class Migration(migrations.Migration):
    dependencies = [("nodepools", "0016_pool_upgrade_defaults")]

    operations = [migrations.RunPython(run(PLACEMENT_FUNCTIONS_0017), run(DROP_PLACEMENT_FUNCTIONS_0017))]
