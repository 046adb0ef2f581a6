"""Reads: the GPUs a tenant sees with their latest values, a GPU's history."""

import datetime

from django.utils import timezone

from nodepools.models import Gpu

from . import store
from .models import MetricPoint


def gpus_with_latest(gpus) -> list[tuple[Gpu, dict | None]]:
    gpus = list(gpus)
    latest = store.latest([g.pk for g in gpus])
    return [(g, latest.get(g.pk)) for g in gpus]


def history(gpu_id: int, resolution_s: int, minutes: int) -> list[MetricPoint]:
    since = timezone.now() - datetime.timedelta(minutes=minutes)
    return list(
        MetricPoint.objects.filter(gpu_id=gpu_id, resolution_s=resolution_s, bucket__gte=since).order_by(
            "bucket"
        )
    )
