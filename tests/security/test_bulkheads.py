"""Bulkheads: the tasks that call tenants' clusters have queues of their own, served by workers of their
own, and every task has time limits under the broker's visibility timeout."""

from pathlib import Path

import yaml
from django.conf import settings

from nodepools import tasks as pool_tasks
from nvke.celery import app

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
CALLS_CLUSTERS = [
    "nodepools.tasks.reconcile_pool",
    "nodepools.tasks.autoscale_cluster",
    "clusters.tasks.provision_cluster",
    "clusters.tasks.teardown_cluster",
    "upgrades.tasks.tick_run",
    "upgrades.tasks.step_control_plane",
    "upgrades.tasks.advance_rollout",
]
NEVER_WAITS_ON_A_TENANT = [
    "claims.tasks.place_pending_claims",
    "claims.tasks.place_all_pending_claims",
    "telemetry.tasks.rollup",
    "audit.tasks.prune_audit_log",
]


def queue_of(task: str) -> str:
    route = app.amqp.router.route({}, task)
    return route["queue"].name


def worker_queues() -> dict[str, set[str]]:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    queues = {}
    for name, service in services.items():
        command = service.get("command") or []
        if "worker" in command:
            queues[name] = set(command[command.index("-Q") + 1].split(","))
    return queues


def test_tasks_that_call_tenant_clusters_have_their_own_queues():
    assert {queue_of(task) for task in CALLS_CLUSTERS} <= set(settings.NVKE_TENANT_CLUSTER_QUEUES)
    assert not {queue_of(task) for task in NEVER_WAITS_ON_A_TENANT} & set(settings.NVKE_TENANT_CLUSTER_QUEUES)


def test_no_worker_serves_tenant_clusters_and_the_allocator():
    workers = worker_queues()
    tenant = set(settings.NVKE_TENANT_CLUSTER_QUEUES)
    assert all(not (queues & tenant and queues - tenant) for queues in workers.values()), workers
    served = set().union(*workers.values())
    routed = {queue_of(task) for task in CALLS_CLUSTERS + NEVER_WAITS_ON_A_TENANT}
    assert routed <= served, "every queue has a worker"


def test_every_task_has_time_limits_under_the_visibility_timeout():
    soft, hard = app.conf.task_soft_time_limit, app.conf.task_time_limit
    assert soft and hard and soft < hard < settings.NVKE_BROKER_VISIBILITY_TIMEOUT_S
    task = pool_tasks.reconcile_pool  # each message carries its sender's limits: the task's
    assert (task.soft_time_limit, task.time_limit) == (soft, hard)
