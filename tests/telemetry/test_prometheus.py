"""/metrics: Prometheus text format with fleet and allocation figures, behind its own token."""

import re

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from .conftest import post, sample

pytestmark = pytest.mark.django_db
LINE = re.compile(r'^(# (HELP|TYPE) \w+ .+|\w+(\{(\w+="[^"]*",?)*\})? -?[\d.e+]+)$')


@override_settings(METRICS_TOKEN="scrape-me")
def test_metrics_expose_fleet_and_allocation(frac_pool, claim_in, node, node_client):
    claim_in("a", 40)
    assert (
        post(
            node_client, [sample(g, util=30 + 20 * i) for i, g in enumerate(node.gpus.order_by("index"))]
        ).status_code
        == 202
    )
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert all(LINE.match(line) for line in text.strip().splitlines()), text
    # Read back by Prometheus' own parser: label order and number spelling are the writer's business.
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    families = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert families["nvke_gpus"] == families["nvke_claims"] == "gauge"
    assert samples[("nvke_gpus", (("healthy", "true"), ("model", "l4")))] == 4
    assert samples[("nvke_gpu_memory_mib", (("healthy", "true"), ("model", "l4")))] > 0
    assert samples[("nvke_claims", (("kind", "fraction"), ("status", "allocated")))] == 1
    assert samples[("nvke_allocated_gpu_compute", ())] == 0.4
    assert samples[("nvke_allocated_gpu_memory_mib", ())] == 2048
    assert samples[("nvke_gpus_reporting", ())] == 2
    assert samples[("nvke_gpu_utilization_avg_percent", ())] == 40.0
    assert {"nvke_nodes", "nvke_clusters", "nvke_telemetry_decisions"} <= families.keys()


def test_metrics_need_their_token(db):
    assert Client().get("/metrics").status_code == 404  # off without a token configured
    with override_settings(METRICS_TOKEN="scrape-me"):
        assert Client().get("/metrics").status_code == 401
        assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


@override_settings(METRICS_TOKEN="scrape-me")
def test_frames_count_by_how_long_after_their_oldest_sample_they_were_sent(db):
    """The hub's tick hands each view's frame to its sockets and counts it, once per socket, in the
    bucket of its oldest sample's age: the server's part of sample-to-screen latency, from every process."""
    import asyncio
    import json
    import time

    from telemetry import store
    from telemetry.hub import Hub, View

    store.client().delete(store.FRAME_LAG)
    received = []

    async def send(text: str) -> None:
        received.append(json.loads(text))

    async def close(code: int, reason: str) -> None:
        raise AssertionError("no socket here is slow")

    async def one_frame() -> None:
        hub = Hub()
        view = View("pool:1", {})
        view.gpus, view.loaded_at = [{"id": 1}, {"id": 2}], time.monotonic()
        writer = store.async_client()
        start = await writer.xadd(store.FRESH, {"rows": "[]"})
        for member in (1, 2, 3):
            hub.join(view, member, send, close)  # the first starts the hub's task
        async with asyncio.timeout(10):
            while hub.last_id != start:  # it reads what comes after the stream's newest entry
                await asyncio.sleep(0.01)
        now = time.time()
        rows = [[1, now - 0.3, 50, 0, 0, 0, 0, 0], [2, now - 0.01, 60, 0, 0, 0, 0, 0]]
        await writer.xadd(store.FRESH, {"rows": json.dumps(rows)})
        await writer.aclose()
        async with asyncio.timeout(10):
            while len(received) < 3:
                await asyncio.sleep(0.01)
        for member in (1, 2, 3):
            hub.leave(view.key, member)
        await asyncio.wait_for(hub.task, 10)  # its tick has counted the frames
        await hub.redis.aclose()

    asyncio.run(one_frame())
    assert len(received) == 3 and {row[0] for row in received[0]["gpus"]} == {1, 2}
    text = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    lag = families["nvke_telemetry_frame_lag_seconds"]
    assert lag.type == "histogram"
    counts = {s.labels["le"]: s.value for s in lag.samples if s.name.endswith("_bucket")}
    assert (counts["0.25"], counts["0.5"], counts["+Inf"]) == (0, 3, 3)  # aged by the older sample
    total = next(s.value for s in lag.samples if s.name.endswith("_sum"))
    assert 0.9 <= total < 1.5  # three frames, each ~0.3 s
