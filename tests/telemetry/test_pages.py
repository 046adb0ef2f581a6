"""Telemetry pages (Django test client): what they render, the stream they open, tenant isolation."""

import re

import pytest
from django.test import Client

from telemetry.models import TelemetryEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(owner):
    client = Client()
    client.force_login(owner)
    return client


def test_fleet_page_lists_pools_and_decisions_and_opens_the_fleet_stream(browser, frac_pool, cluster, tenant):
    TelemetryEvent.objects.create(tenant=tenant, cluster=cluster, kind="claim.grown", message="Claim x grew")
    page = browser.get("/telemetry/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-telemetry-ws="/ws/telemetry/"' in html
    assert f'data-series="pool-{frac_pool.pk}"' in html and "data-heatmap" in html
    assert "Claim x grew" in html
    # The page's scripts, all from the app (no CDN), in the order they run: socket.js and uPlot before
    # telemetry.js, which needs both.
    scripts = re.findall(r'<script src="([^"]+)"', html)
    assert scripts == [
        "/static/frontend/socket.js",
        "/static/frontend/vendor/uplot/uPlot.iife.min.js",
        "/static/frontend/telemetry.js",
    ]
    assert '<link rel="stylesheet" href="/static/frontend/vendor/uplot/uPlot.min.css">' in html


def test_cluster_pool_and_gpu_pages_open_their_streams(browser, frac_pool, cluster):
    cluster_page = browser.get(f"/telemetry/clusters/{cluster.pk}/").content.decode()
    assert f'data-telemetry-ws="/ws/telemetry/?cluster={cluster.pk}"' in cluster_page
    assert f'data-series="pool-{frac_pool.pk}"' in cluster_page and "Cluster heatmap" in cluster_page
    gpu = frac_pool.nodes.first().gpus.first()
    pool_page = browser.get(f"/telemetry/pools/{frac_pool.pk}/").content.decode()
    assert f'data-telemetry-ws="/ws/telemetry/?pool={frac_pool.pk}"' in pool_page
    assert pool_page.count('data-series="gpu-') == 4
    gpu_page = browser.get(f"/telemetry/gpus/{gpu.pk}/").content.decode()
    assert f'data-telemetry-ws="/ws/telemetry/?gpu={gpu.pk}"' in gpu_page and str(gpu.uuid) in gpu_page


def test_other_tenants_pages_are_404_and_their_decisions_hidden(frac_pool, make_member, cluster, tenant):
    TelemetryEvent.objects.create(tenant=tenant, cluster=cluster, kind="gpu.unhealthy", message="secret XID")
    stranger = Client()
    stranger.force_login(make_member("globex", "owner"))
    gpu = frac_pool.nodes.first().gpus.first()
    assert stranger.get(f"/telemetry/pools/{frac_pool.pk}/").status_code == 404
    assert stranger.get(f"/telemetry/clusters/{cluster.pk}/").status_code == 404
    assert stranger.get(f"/telemetry/gpus/{gpu.pk}/").status_code == 404
    fleet = stranger.get("/telemetry/").content.decode()
    assert "secret XID" not in fleet and f"pool-{frac_pool.pk}" not in fleet
    assert Client().get("/telemetry/").status_code == 302  # signed out: to the login page


def test_chart_script_is_served(browser):
    response = browser.get("/static/frontend/telemetry.js")
    assert response.status_code == 200
    assert b"telemetry.frame" in b"".join(response.streaming_content)
