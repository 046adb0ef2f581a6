"""Node state changes of an upgrade reach a real websocket client through a real ASGI server."""

import pytest

from catalog.models import DriverRelease
from tests.integration.processes import wait_until
from tests.integration.test_websocket import open_socket, receive_until
from upgrades import services
from upgrades.models import UpgradeRun

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_node_states_stream_over_the_websocket(asgi_server, owner, context, make_upgrade_pool, settings):
    settings.NVKE_UPGRADE_TICK_S = 0.05  # eager here: this process's ticker thread runs the ticks
    pool = make_upgrade_pool(nodes=2)
    run = services.create_run(
        context=context,
        pool=pool,
        target_release=DriverRelease.objects.get(version="595.71.05"),
        start=False,
    )
    with open_socket(asgi_server, owner, f"/ws/events/?cluster={pool.cluster_id}") as socket:
        services.control(run, "start")
        event, seen = receive_until(
            socket, lambda e: e["type"] == "upgrade.node" and e["state"] == "wait-for-jobs-required"
        )
    assert event["run"] == run.pk and event["pool"] == pool.pk and event["reason"] == "Cordoned"
    assert any(e["type"] == "upgrade.run" and e["status"] == "running" for e in seen)
    started = [e for e in seen if e["type"] == "upgrade.node" and e["state"] == "cordon-required"]
    assert started and started[0]["node"] == event["node"]
    wait_until(lambda: UpgradeRun.objects.get(pk=run.pk).status == "completed", "the run to finish")
