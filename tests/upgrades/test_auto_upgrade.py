"""Automatic Kubernetes upgrades: a cluster that allows them, on a version near its end of support, has its
control plane moved one minor, then its pools, each only inside the maintenance windows."""

import datetime

import pytest
from django.test import Client
from django.utils import timezone

from clusters.models import Cluster
from upgrades import auto_upgrade, control_plane
from upgrades.models import MaintenanceExclusion, UpgradeRun

from .conftest import drive

pytestmark = pytest.mark.django_db
NEAR_END = datetime.datetime(2027, 1, 20, tzinfo=datetime.UTC)  # 1.35 ends on 2027-02-28
FAR = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)


def condition(cluster: Cluster) -> tuple[str, str]:
    cluster.refresh_from_db()
    found = next(c for c in cluster.conditions if c["type"] == auto_upgrade.CONDITION)
    return found["reason"], found["message"]


def test_near_its_end_of_support_the_control_plane_then_the_pool_move_by_themselves(make_upgrade_pool):
    pool = make_upgrade_pool(nodes=2)
    cluster = pool.cluster
    auto_upgrade.step(NEAR_END)
    cluster.refresh_from_db()
    assert cluster.kubernetes_target is None  # not allowed by its tenant: nothing happens

    Cluster.objects.filter(pk=cluster.pk).update(auto_upgrade=True)
    auto_upgrade.step(FAR)
    cluster.refresh_from_db()
    assert cluster.kubernetes_target is None  # far from the end of support
    auto_upgrade.step(NEAR_END)
    assert condition(cluster) == ("ControlPlaneStarted", "Upgrading the control plane to 1.36 by itself.")
    assert cluster.kubernetes_target.version == "1.36"
    assert control_plane.step(cluster.pk)

    auto_upgrade.step(NEAR_END)
    assert condition(cluster) == ("PoolStarted", f"Upgrading pool {pool.name} to 1.36 by itself.")
    run = drive(UpgradeRun.objects.get(pool=pool, kind="kubernetes"))
    assert run.status == "completed" and run.window_override is False
    auto_upgrade.step(NEAR_END)  # 1.36 is far from its end: nothing more
    assert UpgradeRun.objects.filter(pool=pool).count() == 1
    cluster.refresh_from_db()
    assert cluster.kubernetes_target is None and cluster.kubernetes_version.version == "1.36"


def test_outside_the_windows_it_waits_and_says_so(make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    cluster = pool.cluster
    Cluster.objects.filter(pk=cluster.pk).update(auto_upgrade=True)
    today = timezone.localdate()
    MaintenanceExclusion.objects.create(
        tenant_id=cluster.tenant_id,
        cluster=cluster,
        first_day=today - datetime.timedelta(days=1),
        last_day=today + datetime.timedelta(days=1),
        scope=MaintenanceExclusion.Scope.MINOR,
    )
    auto_upgrade.step(NEAR_END)
    assert condition(cluster) == ("WaitingForWindow", "The control plane moves to 1.36 in the next window.")
    assert cluster.kubernetes_target is None


def test_the_api_turns_automatic_upgrades_on(api, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    url = f"/api/v1/clusters/{pool.cluster_id}/versions/"
    assert api.get(url).data["auto_upgrade"] is False
    answer = api.put(url, {"auto_upgrade": True}, format="json")
    assert answer.status_code == 200 and answer.data["auto_upgrade"] is True
    assert Cluster.objects.get(pk=pool.cluster_id).auto_upgrade
    assert api.put(url, {"auto_upgrade": "yes"}, format="json").status_code == 400


def test_the_versions_page_turns_automatic_upgrades_on_and_off(owner, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    browser = Client()
    browser.force_login(owner)
    url = f"/clusters/{pool.cluster_id}/versions/"
    assert browser.post(url, {"action": "settings", "auto_upgrade": "on"}).status_code == 302
    assert Cluster.objects.get(pk=pool.cluster_id).auto_upgrade
    assert "Automatic upgrades of prod are on." in browser.get(url).content.decode()
    assert browser.post(url, {"action": "settings"}).status_code == 302
    assert not Cluster.objects.get(pk=pool.cluster_id).auto_upgrade
