"""The history a telemetry page's charts start from: the kept 10 s points of the last minutes, per GPU
and per pool, in the columns telemetry.js draws (epoch seconds, utilization %, memory used % and MiB). Without
it every chart started empty on each page load although the history was there."""

import datetime

from django.db.models import Avg, F, QuerySet, Sum
from django.utils import timezone

from nodepools.models import Gpu
from telemetry.history import FINE_S
from telemetry.models import MetricPoint

POINTS = 120  # telemetry.js keeps as many per series: 20 minutes of 10 s points


def _series(rows, key: str) -> dict[str, dict[str, list]]:
    found: dict[str, dict[str, list]] = {}
    for row in rows:
        series = found.setdefault(f"{key}-{row['owner']}", {"ts": [], "util": [], "mem": [], "used": []})
        series["ts"].append(row["bucket"].timestamp())
        series["util"].append(round(row["util"], 1))
        series["mem"].append(round(100 * row["used"] / (row["total"] or 1), 1))
        series["used"].append(round(row["used"]))
    return found


def chart_history(gpus: QuerySet[Gpu], per_gpu: bool, per_pool: bool) -> dict[str, dict[str, list]]:
    """{"gpu-<id>" or "pool-<id>": {"ts": [...], "util": [...], "mem": [...], "used": [...]}} for the GPUs (a
    pool's series averages its GPUs' utilization and sums their memory), oldest first."""
    since = timezone.now() - datetime.timedelta(seconds=POINTS * FINE_S)
    points = MetricPoint.objects.filter(resolution_s=FINE_S, bucket__gte=since, gpu__in=gpus)
    history: dict[str, dict[str, list]] = {}
    if per_gpu:
        rows = points.values("bucket", owner=F("gpu_id")).annotate(
            util=Avg("utilization"), used=Sum("memory_used_mib"), total=Sum("gpu__memory_mib")
        )
        history |= _series(rows.order_by("bucket"), "gpu")
    if per_pool:
        rows = points.values("bucket", owner=F("gpu__node__pool_id")).annotate(
            util=Avg("utilization"), used=Sum("memory_used_mib"), total=Sum("gpu__memory_mib")
        )
        history |= _series(rows.order_by("bucket"), "pool")
    return history
