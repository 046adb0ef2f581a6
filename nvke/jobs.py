"""Background work enqueued by name once the transaction commits.

Services call `enqueue("clusters.tasks.provision_cluster", cluster.pk)` instead of importing the task:
tasks import services, never the reverse, so no import cycle runs through a tasks module. A rolled-back
transaction sends nothing. In the embedded default (eager Celery) the task runs in this process."""

from celery import Task
from django.db import transaction

from nvke.celery import app


def enqueue(name: str, *args: object, countdown: float | None = None) -> None:
    """Send task `name` (its dotted path) with `args` after the current transaction commits (at once
    outside a transaction), `countdown` seconds later if given."""
    transaction.on_commit(lambda: task(name).apply_async(args, countdown=countdown))


def task(name: str) -> Task:
    """The registered task called `name`. A web process has not imported every app's tasks module;
    Celery's autodiscovery imports them on first use."""
    if name not in app.tasks:
        app.loader.import_default_modules()
    return app.tasks[name]
