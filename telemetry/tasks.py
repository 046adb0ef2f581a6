import time

from celery import shared_task

from audit.context import acting_as

from . import health, history
from . import rescale as rescaling


@shared_task(acks_late=True)
def gpu_failed(gpu_id: int, xid: int) -> None:
    """A fatal XID: take the GPU out of service and move its claims (idempotent)."""
    with acting_as("gpu health"):
        health.fail_gpu(gpu_id, xid)


@shared_task
def rollup() -> None:
    history.rollup()


@shared_task
def rescale() -> None:
    with acting_as("rescaler"):
        rescaling.rescale()


@shared_task
def check_heartbeats() -> None:
    now = time.time()
    with acting_as("gpu health"):
        health.check_heartbeats(now)
        health.repair_nodes(now)
