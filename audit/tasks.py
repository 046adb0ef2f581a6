from celery import shared_task

from . import retention


@shared_task
def prune_audit_log() -> int:
    """Beat, hourly: drop entries past NVKE_AUDIT_RETENTION_DAYS."""
    return retention.prune()
