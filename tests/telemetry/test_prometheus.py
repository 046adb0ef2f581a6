"""/metrics: Prometheus text format with fleet and allocation figures, behind its own token."""

import re

import pytest
from django.test import Client, override_settings

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
    assert 'nvke_gpus{model="l4",healthy="true"} 4' in text
    assert 'nvke_claims{kind="fraction",status="allocated"} 1' in text
    assert "nvke_allocated_gpu_compute 0.4" in text
    assert "nvke_allocated_gpu_memory_mib 2048" in text
    assert "nvke_gpus_reporting 2" in text and "nvke_gpu_utilization_avg_percent 40.0" in text


def test_metrics_need_their_token(db):
    assert Client().get("/metrics").status_code == 404  # off without a token configured
    with override_settings(METRICS_TOKEN="scrape-me"):
        assert Client().get("/metrics").status_code == 401
        assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
