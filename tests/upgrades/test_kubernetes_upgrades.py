"""Kubernetes version upgrades on the simulator: the control plane one minor at a time, then a pool's
machines replaced a node at a time through the same machine, drain and budget as driver upgrades; every
refused plan names the skew rule it breaks."""

import datetime

import pytest
from django.utils import timezone

from catalog.models import KubernetesVersion
from claims.models import Claim
from clusters.models import Cluster
from nodepools.models import Node
from nvke.errors import Conflict, Incompatible
from nvke.providers.simulator.models import SimCluster, SimFault, SimNode
from upgrades import control_plane, services
from upgrades.models import MaintenanceExclusion, UpgradeRun

from .conftest import drive

pytestmark = pytest.mark.django_db


def upgrade_control_plane(cluster: Cluster, version: str, **kwargs) -> Cluster:
    control_plane.start(cluster, version, **kwargs)
    control_plane.step(cluster.pk)  # the task's step, queued on commit
    cluster.refresh_from_db()
    return cluster


def test_control_plane_then_pool_move_a_minor_with_machines_replaced_under_the_budget(
    context, make_upgrade_pool
):
    pool = make_upgrade_pool(nodes=4, claims=5)
    cluster = pool.cluster
    assert pool.kubernetes_version == "1.35"
    assert set(Node.objects.filter(pool=pool).values_list("kubelet_version", flat=True)) == {"v1.35.0"}
    with pytest.raises(Incompatible) as refused:  # a kubelet is never newer than the API server
        services.create_run(context=context, pool=pool, kubernetes_version="1.36")
    assert refused.value.code == "newer_than_control_plane"

    cluster = upgrade_control_plane(cluster, "1.36")
    assert cluster.kubernetes_version.version == "1.36" and cluster.kubernetes_target is None
    assert SimCluster.objects.get(key=f"c{cluster.pk}").kubernetes_version == "1.36"
    condition = next(c for c in cluster.conditions if c["type"] == "ControlPlaneUpToDate")
    assert (condition["status"], condition["reason"]) == ("True", "Upgraded")

    driver = pool.driver_release.version
    run = drive(
        services.create_run(context=context, pool=pool, kubernetes_version="1.36", max_unavailable="1")
    )
    assert (run.kind, run.status, run.max_unavailable_seen) == ("kubernetes", "completed", 1)
    assert run.previous_kubernetes_version == "1.35" and run.target_release.version == driver
    pool.refresh_from_db()
    assert pool.kubernetes_version == "1.36" and pool.driver_release.version == driver
    nodes = Node.objects.filter(pool=pool)
    assert set(nodes.values_list("kubelet_version", "driver_version", "cordoned")) == {
        ("v1.36.0", driver, False)
    }
    assert set(SimNode.objects.filter(pool=pool.name).values_list("kubelet_version", flat=True)) == {
        "v1.36.0"
    }
    reasons = set(run.history.values_list("reason", flat=True))
    assert {"Cordoned", "ClaimsEvicted", "Replacing", "Validated", "AllNodesUpgraded"} <= reasons
    assert run.message == "All 4 nodes run Kubernetes 1.36."
    claims = Claim.objects.filter(cluster=cluster)
    assert all(c.status == "allocated" or c.pending_reason for c in claims)


@pytest.mark.parametrize(
    ("control_plane_version", "pools", "target", "rule"),
    [
        ("1.34", {}, "1.36", "skips_minor"),
        ("1.35", {}, "1.34", "downgrade"),
        ("1.35", {}, "1.35", "same_version"),
        ("1.35", {"old": "1.32"}, "1.36", "pool_too_far_behind"),
        ("1.35", {}, "1.99", "unknown_version"),
    ],
)
def test_a_control_plane_plan_that_breaks_a_rule_is_refused_naming_it(
    owner, make_cluster, make_pool, control_plane_version, pools, target, rule
):
    cluster = make_cluster(owner.memberships.get().tenant, "prod")
    Cluster.objects.filter(pk=cluster.pk).update(
        kubernetes_version=KubernetesVersion.objects.get(version=control_plane_version)
    )
    cluster.refresh_from_db()
    for name, version in pools.items():
        make_pool(cluster, name=name, kubernetes_version=version)
    with pytest.raises(Incompatible) as refused:
        control_plane.start(cluster, target)
    assert refused.value.code == rule and refused.value.field == "kubernetes_version"
    cluster.refresh_from_db()
    assert cluster.kubernetes_target is None and cluster.kubernetes_version.version == control_plane_version


def test_a_pool_three_minors_behind_may_move_several_at_once(context, owner, make_cluster, make_pool):
    cluster = make_cluster(owner.memberships.get().tenant, "prod")
    pool = make_pool(cluster, kubernetes_version="1.32")
    refusals = {o["version"]: o["rule"] for o in control_plane.document(cluster)["pools"][0]["options"]}
    assert refusals == {"1.36": "newer_than_control_plane", "1.35": "", "1.34": "", "1.33": ""}
    run = services.create_run(context=context, pool=pool, kubernetes_version="1.35", start=False)
    assert run.kind == "kubernetes" and run.previous_kubernetes_version == "1.32"


def test_attached_clusters_are_not_upgraded(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    Cluster.objects.filter(pk=pool.cluster_id).update(attached=True)
    pool.refresh_from_db()
    with pytest.raises(Incompatible) as refused:
        control_plane.start(pool.cluster, "1.36")
    assert refused.value.code == "not_managed"
    with pytest.raises(Incompatible) as refused:
        services.create_run(context=context, pool=pool, kubernetes_version="1.35")
    assert refused.value.code == "not_managed"


def test_a_minor_exclusion_holds_kubernetes_upgrades_but_not_driver_ones(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    cluster = pool.cluster
    today = timezone.localdate()
    MaintenanceExclusion.objects.create(
        tenant_id=cluster.tenant_id,
        cluster=cluster,
        first_day=today - datetime.timedelta(days=1),
        last_day=today + datetime.timedelta(days=1),
        scope=MaintenanceExclusion.Scope.MINOR,
    )
    with pytest.raises(Conflict) as refused:
        control_plane.start(cluster, "1.36")
    assert refused.value.code == "outside_maintenance_window"
    started = control_plane.start(cluster, "1.36", override_window=True)
    assert "outside the maintenance windows on purpose" in started.conditions[-1]["message"]
    control_plane.step(cluster.pk)
    cluster.refresh_from_db()
    assert cluster.kubernetes_version.version == "1.36"
    with pytest.raises(Conflict) as refused:
        services.create_run(context=context, pool=pool, kubernetes_version="1.36")
    assert refused.value.code == "outside_maintenance_window"
    assert services.create_run(context=context, pool=pool, kubernetes_version="1.36", override_window=True)


def test_a_refused_replacement_fails_the_node_and_a_kubernetes_run_has_no_rollback(
    context, make_upgrade_pool
):
    pool = make_upgrade_pool(nodes=2)
    cluster = upgrade_control_plane(pool.cluster, "1.36")
    assert cluster.kubernetes_version.version == "1.36"
    first = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation=SimFault.Operation.REPLACE_NODE, target=first.name, reason="NoCapacity")
    run = drive(services.create_run(context=context, pool=pool, kubernetes_version="1.36", failure_budget=2))
    assert run.status == "failed"
    failed = run.nodes.get(name=first.name)
    assert (failed.state, failed.reason) == ("upgrade-failed", "NoCapacity")
    assert SimNode.objects.get(name=first.name).kubelet_version == "v1.35.0"
    pool.refresh_from_db()
    assert pool.kubernetes_version == "1.35"  # not every node moved: the pool's version stays
    with pytest.raises(Conflict) as refused:
        services.control(run, "rollback", context=context)
    assert refused.value.code == "no_downgrade"
    assert UpgradeRun.objects.filter(pool=pool).count() == 1


def test_a_control_plane_the_provider_refuses_keeps_its_version_and_says_why(make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    key = f"c{pool.cluster_id}"
    SimFault.objects.create(
        operation=SimFault.Operation.UPGRADE_CONTROL_PLANE, target=key, reason="EtcdUnhealthy"
    )
    cluster = upgrade_control_plane(pool.cluster, "1.36")
    assert cluster.kubernetes_version.version == "1.35" and cluster.kubernetes_target is None
    condition = next(c for c in cluster.conditions if c["type"] == "ControlPlaneUpToDate")
    assert (condition["status"], condition["reason"]) == ("False", "EtcdUnhealthy")
    assert SimCluster.objects.get(key=key).kubernetes_version == "1.35"


def test_end_of_support_notice():
    version = KubernetesVersion(version="1.35", end_of_support=datetime.date(2027, 2, 28))
    assert control_plane.support_notice(version, datetime.date(2026, 6, 1)) == ""
    assert "in 30 days" in control_plane.support_notice(version, datetime.date(2027, 1, 29))
    assert "reached its end of support on 2027-02-28" in control_plane.support_notice(
        version, datetime.date(2027, 3, 1)
    )


def test_the_api_lists_versions_with_their_rules_and_upgrades_the_control_plane_then_a_pool(
    api, make_upgrade_pool
):
    pool = make_upgrade_pool(nodes=2)
    url = f"/api/v1/clusters/{pool.cluster_id}/versions/"
    data = api.get(url).data
    assert (data["version"], data["target"], data["end_of_support"]) == ("1.35", "", "2027-02-28")
    rules = {o["version"]: (o["allowed"], o["rule"]) for o in data["options"]}
    assert rules == {
        "1.36": (True, ""),
        "1.35": (False, "same_version"),
        "1.34": (False, "downgrade"),
        "1.33": (False, "downgrade"),
    }
    assert [(p["name"], p["version"]) for p in data["pools"]] == [(pool.name, "1.35")]

    refused = api.post(url, {"kubernetes_version": "1.34"}, format="json")
    assert (refused.status_code, refused.data["code"], refused.data["details"]["field"]) == (
        400,
        "downgrade",
        "kubernetes_version",
    )
    started = api.post(url, {"kubernetes_version": "1.36"}, format="json")
    assert started.status_code == 200, started.data
    assert (started.data["version"], started.data["target"]) == ("1.35", "1.36")  # stepped on commit
    control_plane.step(pool.cluster_id)
    data = api.get(url).data
    assert (data["version"], data["target"], data["reason"]) == ("1.36", "", "Upgraded")

    both = api.post(
        "/api/v1/upgrades/",
        {"pool": pool.pk, "target_release": "595.71.05", "kubernetes_version": "1.36"},
        format="json",
    )
    assert (both.status_code, both.data["code"]) == (400, "one_target")
    too_new = api.post("/api/v1/upgrades/", {"pool": pool.pk, "kubernetes_version": "1.37"}, format="json")
    assert (too_new.status_code, too_new.data["code"]) == (400, "unknown_version")
    created = api.post("/api/v1/upgrades/", {"pool": pool.pk, "kubernetes_version": "1.36"}, format="json")
    assert created.status_code == 201, created.data
    assert (created.data["kind"], created.data["kubernetes_version"]) == ("kubernetes", "1.36")
    assert created.data["previous_kubernetes_version"] == "1.35"
    run = drive(UpgradeRun.objects.get(pk=created.data["id"]))
    assert run.status == "completed"
    assert api.get(url).data["pools"][0]["version"] == "1.36"
