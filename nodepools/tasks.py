import functools

import redis
from celery import shared_task
from django.conf import settings
from django.db import transaction

from clusters.models import Cluster
from clusters.tasks import provision_cluster, teardown_cluster

from . import claims, services
from .models import Claim, NodePool


@shared_task(acks_late=True)
def reconcile_pool(pool_id: int) -> None:
    services.reconcile(pool_id)


@shared_task
def reconcile_all_pools() -> None:
    """Beat's resync: anything not settled gets another step (capacity may have freed up)."""
    for cluster_id, status in Cluster.objects.exclude(status__in=["running", "failed"]).values_list(
        "pk", "status"
    ):
        (provision_cluster if status == "provisioning" else teardown_cluster).delay(cluster_id)
    for pool_id in NodePool.objects.exclude(status__in=["ready", "failed"]).values_list("pk", flat=True):
        reconcile_pool.delay(pool_id)


PASS_QUEUED_TTL_S = 30  # a lost pass is not waited for longer (beat resyncs on the same period)


def request_placement(cluster_id: int) -> None:
    """Once the transaction commits, ask the allocator queue for a pass over the cluster's pending claims.
    While a pass is queued and not yet started, later requests ride on it instead of queueing their own."""
    transaction.on_commit(lambda: _queue_pass(cluster_id))


def _queue_pass(cluster_id: int) -> None:
    if settings.REDIS_URL and not _redis().set(_queued_key(cluster_id), 1, nx=True, ex=PASS_QUEUED_TTL_S):
        return  # a pass is queued and has not started: it will see this claim
    place_pending_claims.delay(cluster_id)


@functools.cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def _queued_key(cluster_id: int) -> str:
    return f"nvke:allocator:pass-queued:{cluster_id}"


@shared_task(acks_late=True)
def place_pending_claims(cluster_id: int) -> None:
    """Capacity changed or claims were queued: place the cluster's pending claims in one pass."""
    if settings.REDIS_URL:
        # Before reading what is pending: a claim committed from now on queues the next pass.
        _redis().delete(_queued_key(cluster_id))
    claims.place_pending(cluster_id)


@shared_task
def place_all_pending_claims() -> None:
    """Beat's resync of the allocator queue."""
    pending = Claim.objects.filter(status=Claim.Status.PENDING)
    for cluster_id in pending.values_list("cluster_id", flat=True).distinct():
        place_pending_claims.delay(cluster_id)


@shared_task
def prune_allocation_log() -> None:
    """Drop allocation-log entries older than any in-memory inventory can be (see claims.Snapshot)."""
    claims.prune_log()
