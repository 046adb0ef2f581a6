"""The allocator queue: a placement pass over a cluster's pending claims, run by a worker
(`claims.tasks.place_pending_claims`). While a pass is queued and not yet started, later requests
ride on it instead of queueing their own."""

import functools

import redis
from django.conf import settings
from django.db import transaction

from nvke import jobs

PASS_QUEUED_TTL_S = 30  # a lost pass is not waited for longer (beat resyncs on the same period)


def request_placement(cluster_id: int) -> None:
    """Once the transaction commits, ask for a pass over the cluster's pending claims."""
    transaction.on_commit(lambda: _queue_pass(cluster_id))


def pass_started(cluster_id: int) -> None:
    """Call before the pass reads what is pending: a claim committed from now on queues the next pass."""
    if settings.REDIS_URL:
        _redis().delete(_queued_key(cluster_id))


def _queue_pass(cluster_id: int) -> None:
    if settings.REDIS_URL and not _redis().set(_queued_key(cluster_id), 1, nx=True, ex=PASS_QUEUED_TTL_S):
        return  # a pass is queued and has not started: it will see this claim
    jobs.task("claims.tasks.place_pending_claims").delay(cluster_id)


@functools.cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def _queued_key(cluster_id: int) -> str:
    return f"nvke:allocator:pass-queued:{cluster_id}"
