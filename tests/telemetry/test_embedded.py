"""Without Redis (the embedded default) telemetry stores nothing: ingestion says so, reads are empty."""

import pytest
from django.test import override_settings

from telemetry import health, rescale

from .conftest import post, sample

pytestmark = pytest.mark.django_db


@override_settings(REDIS_URL="")
def test_without_redis_ingestion_is_503_and_reads_are_empty(node, node_client, api, clean_redis):
    response = post(node_client, [sample(node.gpus.first())])
    assert response.status_code == 503 and response.data["code"] == "telemetry_unavailable"
    listed = api.get(f"/api/v1/telemetry/gpus/?pool={node.pool_id}").data["results"]
    assert listed and all(g["latest"] is None for g in listed)
    assert rescale.rescale() == [] and health.check_heartbeats(0) == ([], [])
    # Only the Django cache's keys (rate-limit counters, prefix "nvke:"): no telemetry was stored.
    assert [key for key in clean_redis.keys("*") if not key.startswith(b"nvke:")] == []
