"""How long the audit log keeps its entries: NVKE_AUDIT_RETENTION_DAYS (0 keeps them forever). Beat
prunes hourly, in batches, so one run never holds long locks on a big table or one huge transaction."""

import datetime

from django.conf import settings
from django.utils import timezone

from .models import AuditEntry

BATCH = 5000


def prune(now: datetime.datetime | None = None) -> int:
    """Delete entries older than the retention; returns how many went."""
    days = settings.NVKE_AUDIT_RETENTION_DAYS
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - datetime.timedelta(days=days)
    deleted = 0
    while True:
        batch = list(AuditEntry.objects.filter(created_at__lt=cutoff).values_list("pk", flat=True)[:BATCH])
        if not batch:
            return deleted
        deleted += AuditEntry.objects.filter(pk__in=batch).delete()[0]
