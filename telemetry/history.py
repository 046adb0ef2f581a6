"""History: closed 10 s buckets of raw samples become one averaged point per GPU; closed minutes of
10 s points become 1 min points; 10 s points are kept for an hour, 1 min points for a week. Each rollup
also leaves every reporting pool's mean GPU utilization over the last minute on its row."""

import datetime
from collections import defaultdict

from django.db.models import Avg, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from nodepools import nodes
from nodepools.models import Gpu

from . import store
from .metrics import HISTORY_KEYS
from .models import MetricPoint

FINE_S, COARSE_S = store.BUCKET_S, 60
FINE_KEEP = datetime.timedelta(hours=1)
COARSE_KEEP = datetime.timedelta(days=7)
GRACE_S = 2  # a batch may arrive a little after its bucket closed
COLUMNS = ("utilization", "memory_used_mib", "temperature_c", "power_w", "sm_clock_mhz")
FIELDS = dict(zip(HISTORY_KEYS, COLUMNS, strict=True))  # short key → MetricPoint column


def _at(ts: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC)


def roll_fine(now: float) -> int:
    """Average every closed bucket's raw samples into 10 s points. Returns how many points."""
    points = []
    known = None
    for bucket in store.raw_buckets():
        if bucket + FINE_S + GRACE_S > now:
            continue
        sums: dict[int, list[float]] = defaultdict(lambda: [0.0] * (len(HISTORY_KEYS) + 1))
        for gpu_id, _ts, *values in store.take_raw(bucket):
            acc = sums[gpu_id]
            acc[0] += 1
            for i, value in enumerate(values):
                acc[i + 1] += value or 0.0
        if known is None:  # a GPU deleted since it reported has nothing to attach history to
            known = set(Gpu.objects.values_list("pk", flat=True))
        for gpu_id, (n, *totals) in sums.items():
            if gpu_id in known:
                averages = {FIELDS[k]: total / n for k, total in zip(HISTORY_KEYS, totals, strict=True)}
                points.append(
                    MetricPoint(gpu_id=gpu_id, resolution_s=FINE_S, bucket=_at(bucket), samples=n, **averages)
                )
    MetricPoint.objects.bulk_create(points, batch_size=2000, ignore_conflicts=True)
    return len(points)


def roll_coarse(now: float) -> int:
    """1 min points for the closed minutes of the last hour that do not have them yet."""
    end = _at(now - FINE_S - GRACE_S).replace(second=0, microsecond=0)
    fine = MetricPoint.objects.filter(
        resolution_s=FINE_S, bucket__gte=end - FINE_KEEP, bucket__lt=end
    ).annotate(minute=TruncMinute("bucket"))
    done = set(
        MetricPoint.objects.filter(resolution_s=COARSE_S, bucket__gte=end - FINE_KEEP).values_list(
            "gpu_id", "bucket"
        )
    )
    rows = fine.values("gpu_id", "minute").annotate(
        n=Sum("samples"), **{name: Avg(name) for name in FIELDS.values()}
    )
    points = [
        MetricPoint(
            gpu_id=row["gpu_id"],
            resolution_s=COARSE_S,
            bucket=row["minute"],
            samples=row["n"],
            **{name: row[name] for name in FIELDS.values()},
        )
        for row in rows
        if (row["gpu_id"], row["minute"]) not in done
    ]
    MetricPoint.objects.bulk_create(points, batch_size=2000, ignore_conflicts=True)
    return len(points)


def prune(now: float) -> int:
    at = _at(now)
    fine = MetricPoint.objects.filter(resolution_s=FINE_S, bucket__lt=at - FINE_KEEP).delete()[0]
    coarse = MetricPoint.objects.filter(resolution_s=COARSE_S, bucket__lt=at - COARSE_KEEP).delete()[0]
    return fine + coarse


def summarize_pools(now: float) -> dict[int, float]:
    """Each pool's mean GPU utilization over the 10 s points of the last minute (pools with none are left
    as they were: their summary's time says how old it is)."""
    recent = MetricPoint.objects.filter(resolution_s=FINE_S, bucket__gte=_at(now - COARSE_S))
    by_pool = dict(
        recent.values("gpu__node__pool_id")
        .annotate(mean=Avg("utilization"))
        .values_list("gpu__node__pool_id", "mean")
    )
    nodes.record_utilization(by_pool, _at(now))
    return by_pool


def rollup(now: float | None = None) -> None:
    now = timezone.now().timestamp() if now is None else now
    roll_fine(now)
    roll_coarse(now)
    prune(now)
    summarize_pools(now)
