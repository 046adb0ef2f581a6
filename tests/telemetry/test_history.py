"""History: raw samples become 10 s averages, those become 1 min averages; old points are pruned."""

import datetime
import time

import pytest

from telemetry import history
from telemetry.models import MetricPoint

from .conftest import post, sample

pytestmark = pytest.mark.django_db


def at(ts: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC)


def test_closed_buckets_are_averaged_then_rolled_into_minutes(node, node_client, clean_redis, api):
    gpu = node.gpus.order_by("index").first()
    minute = (time.time() // 60 - 3) * 60  # a whole minute, three minutes ago
    # Six 10 s buckets, two samples each: utilisation 10·k and 10·k + 20 in bucket k.
    samples = [
        sample(gpu, minute + 10 * k + offset, util=10 * k + 20 * (offset // 5))
        for k in range(6)
        for offset in (1, 6)
    ]
    assert post(node_client, samples).status_code == 202

    now = minute + 200
    assert history.roll_fine(now) == 6
    fine = list(MetricPoint.objects.filter(gpu=gpu, resolution_s=10).order_by("bucket"))
    assert [p.bucket for p in fine] == [at(minute + 10 * k) for k in range(6)]
    assert [p.utilization for p in fine] == [10 * k + 10 for k in range(6)]
    assert all(p.samples == 2 and p.memory_used_mib == 1024 for p in fine)
    assert clean_redis.keys("tm:raw:*") == []  # raw samples are consumed once

    assert history.roll_coarse(now) == 1
    assert history.roll_coarse(now) == 0  # a minute is rolled once
    coarse = MetricPoint.objects.get(gpu=gpu, resolution_s=60)
    assert coarse.bucket == at(minute) and coarse.samples == 12
    assert coarse.utilization == pytest.approx(sum(10 * k + 10 for k in range(6)) / 6)

    served = api.get(f"/api/v1/telemetry/gpus/{gpu.pk}/history/?resolution=60&minutes=10").data
    assert [p["utilization"] for p in served] == [coarse.utilization]
    bad = api.get(f"/api/v1/telemetry/gpus/{gpu.pk}/history/?resolution=5")
    assert bad.status_code == 400 and bad.data["details"]["field"] == "resolution"


def test_open_bucket_waits(node, node_client):
    gpu = node.gpus.first()
    now = time.time()
    assert post(node_client, [sample(gpu, now)]).status_code == 202
    assert history.roll_fine(now) == 0
    assert history.roll_fine(now + 30) == 1


def test_retention(node):
    gpu = node.gpus.first()
    now = time.time()
    values = dict(samples=1, utilization=1, memory_used_mib=1, temperature_c=1, power_w=1, sm_clock_mhz=1)
    for resolution, age in ((10, 3500), (10, 3700), (60, 6 * 86400), (60, 8 * 86400)):
        MetricPoint.objects.create(gpu=gpu, resolution_s=resolution, bucket=at(now - age), **values)
    assert history.prune(now) == 2
    kept = sorted(MetricPoint.objects.values_list("resolution_s", "bucket"))
    assert kept == [(10, at(now - 3500)), (60, at(now - 6 * 86400))]


def test_a_rollup_leaves_each_pools_mean_gpu_utilization_of_the_last_minute_on_it(node, node_client):
    gpus = list(node.gpus.order_by("index")[:2])
    now = time.time()
    for seconds_ago, util in ((120, 5.0), (40, 60.0), (20, 80.0)):  # the first is older than a minute
        for gpu in gpus:
            MetricPoint.objects.create(
                gpu=gpu,
                resolution_s=10,
                bucket=at(now - seconds_ago),
                samples=1,
                utilization=util + gpu.index,
                memory_used_mib=0,
                temperature_c=0,
                power_w=0,
                sm_clock_mhz=0,
            )
    assert history.summarize_pools(now) == {node.pool_id: pytest.approx(70.5)}
    node.pool.refresh_from_db()
    assert node.pool.gpu_utilization == pytest.approx(70.5) and node.pool.gpu_utilization_at == at(now)
