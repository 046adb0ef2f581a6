"""Without Redis (the embedded default) telemetry lives in an in-process store: ingestion, reads, the
rescaler and heartbeats work as they do on Redis, nothing reaches a Redis server, and the store's
memory stays bounded. tests/integration/test_embedded_default.py watches the live stream of a real
embedded server."""

import pytest

from clusters.models import Cluster
from nvke.celery import app as celery_app
from telemetry import embedded, health, history, store, synthetic_load

from .conftest import post, sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def in_process_store(settings, monkeypatch):
    """This process's store as the embedded default has it: no REDIS_URL, a fresh in-process server."""
    settings.REDIS_URL = ""
    monkeypatch.setattr(store, "_client", None)
    monkeypatch.setattr(store, "_in_process", None)
    return store.client()


def telemetry_keys(client) -> list[bytes]:
    return [key for key in client.keys("*") if not key.startswith(b"nvke:")]  # not the cache's


def test_without_redis_ingestion_is_stored_in_process(in_process_store, node, node_client, api, clean_redis):
    gpu = node.gpus.order_by("index").first()
    response = post(node_client, [sample(gpu, util=73)])
    assert response.status_code == 202, response.data
    listed = {
        g["id"]: g["latest"] for g in api.get(f"/api/v1/telemetry/gpus/?pool={node.pool_id}").data["results"]
    }
    assert listed[gpu.pk]["util"] == 73
    assert set(store.heartbeats()) == {node.pk}
    assert health.check_heartbeats(store.heartbeats()[node.pk] + 1) == ([], [])
    assert telemetry_keys(in_process_store) and telemetry_keys(clean_redis) == []  # no server was used


def test_a_bad_batch_is_refused_and_counted_in_process(in_process_store, node, node_client):
    response = post(node_client, [{"gpu": "GPU-not-mine", "ts": 1.0, "metrics": {}}])
    assert response.status_code == 400
    assert sum(store.ingest_counts().values()) > 0


def test_the_in_process_store_stays_bounded(in_process_store, frac_pool, monkeypatch):
    """An hour of the simulator's samples with beat's rollup: raw buckets are rolled up, the live stream
    is trimmed, and what is left is one key per GPU and a few fixed ones."""
    monkeypatch.setattr(store, "FRESH_MAXLEN", 50)
    gpus = synthetic_load.layout(embedded.SIMULATED_GPUS)
    start = 1_800_000_000.0
    for second in range(0, 3600, 5):
        synthetic_load.tick(start + second, gpus)
        if second % 10 == 0:
            history.rollup(now=start + second)
    history.rollup(now=start + 3600 + 2 * store.BUCKET_S)
    assert in_process_store.xlen(store.FRESH) == 50
    assert store.raw_buckets() == []
    keys = set(telemetry_keys(in_process_store))
    assert keys == {store.gpu_key(g.id).encode() for g in gpus} | {
        store.HEARTBEATS.encode(),
        store.FRESH.encode(),
    }


def test_the_embedded_simulator_plays_only_simulated_clusters(frac_pool):
    """Attached clusters' GPUs report through nvke-agent: the simulator never writes samples for them."""
    assert len(synthetic_load.layout(embedded.SIMULATED_GPUS)) == 4
    Cluster.objects.filter(pk=frac_pool.cluster_id).update(attached=True)
    assert synthetic_load.layout(embedded.SIMULATED_GPUS) == []


def test_the_embedded_upkeep_is_beats_whole_schedule(settings):
    """The embedded default's one scheduler plays every beat entry: the autoscaler's steps, pending
    claims, automatic upgrades (from the resync) would never run on a laptop otherwise."""
    schedule = embedded.upkeep_schedule()
    assert schedule == {
        entry["task"]: float(entry["schedule"]) for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }
    assert (
        schedule["upgrades.tasks.resync_runs"] == settings.CELERY_BEAT_SCHEDULE["resync-upgrades"]["schedule"]
    )
    assert schedule["nodepools.tasks.autoscale_all"] == settings.NVKE_AUTOSCALER_INTERVAL_S
    celery_app.loader.import_default_modules()
    assert set(schedule) <= set(celery_app.tasks)
