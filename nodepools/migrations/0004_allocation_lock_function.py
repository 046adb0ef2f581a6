"""A PostgreSQL function that takes a cluster's allocation lock and returns the allocation log after a
given entry, in one round trip. Being VOLATILE, its query runs on a snapshot taken after the lock is
held, so it sees everything the previous holder committed. SQLite (the embedded default) needs none.

The function's text is claims.allocator.sql's, which keeps it as this migration was written."""

from django.db import migrations

from claims.allocator.sql import ALLOCATION_LOCK_0004, DROP_ALLOCATION_LOCK_0004


def run(sql):
    def operation(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return operation


class Migration(migrations.Migration):
    dependencies = [("nodepools", "0003_allocation_log")]

    operations = [migrations.RunPython(run(ALLOCATION_LOCK_0004), run(DROP_ALLOCATION_LOCK_0004))]
