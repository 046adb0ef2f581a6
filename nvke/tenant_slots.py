"""A per-tenant share of the cluster workers. The tasks that call a tenant's clusters run on their own
workers (NVKE_TENANT_CLUSTER_QUEUES), but those are shared by every tenant: a tenant whose endpoints
stall, with a task for each process, would hold them all until the time limits. Each such task first
takes one of its tenant's NVKE_TENANT_CLUSTER_SLOTS slots; when the tenant holds them all, the task is
sent back to the queue to try again NVKE_TENANT_SLOT_RETRY_S later, and the process takes the next
message — another tenant's.

A slot is a member of a Redis sorted set per tenant, scored by when it lapses: the hard time limit
from when it was taken, so a process killed while holding one frees it by then at the latest. Without
Redis (the embedded default, tasks run eagerly in the web process) there is nothing to share out."""

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from django.conf import settings

PREFIX = "nvke:tenant-slots:"

# KEYS: the tenant's set. ARGV: now (ms), lapses at (ms), the task's id, the tenant's slots. 1 when taken
# (or held already: a message delivered again), 0 when the tenant holds every slot.
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


@functools.cache
def _take() -> Any:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    return client.register_script(_TAKE)


@contextmanager
def held(task: Any, tenant_id: int | None) -> Iterator[None]:
    """Run the body in one of the tenant's slots, or retry the (bound) task later without running it."""
    limit = settings.NVKE_TENANT_CLUSTER_SLOTS
    request = task.request  # no id: called as a function, not delivered as a message
    if tenant_id is None or not limit or not settings.REDIS_URL or request.is_eager or not request.id:
        yield
        return
    key, member = f"{PREFIX}{tenant_id}", request.id
    now = time.time()
    lapses = now + settings.CELERY_TASK_TIME_LIMIT + 5  # past the hard limit, the process is gone
    script = _take()
    if not script(keys=[key], args=[int(now * 1000), int(lapses * 1000), member, limit]):
        raise task.retry(countdown=settings.NVKE_TENANT_SLOT_RETRY_S, max_retries=None)
    try:
        yield
    finally:
        script.registered_client.zrem(key, member)


def limited(tenant_of: Callable[..., int | None]) -> Callable:
    """Decorate a bound task (`shared_task(bind=True)` over this): it runs in a slot of the tenant
    `tenant_of(*args)` names (None: the object is gone; the task runs and finds nothing to do)."""

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def run(task: Any, *args: Any) -> Any:
            with held(task, tenant_of(*args)):
                return function(task, *args)

        return run

    return decorate
