"""Upgrade runs ticked against the simulator and the allocator, invariants checked after every tick."""

import pytest

from catalog.models import DriverRelease
from claims import allocator as claims_service
from claims.models import Allocation, Claim
from nodepools.models import Node
from nvke.errors import Conflict
from nvke.providers.simulator.models import SimFault, SimNode
from upgrades import services
from upgrades.controller import tick
from upgrades.models import UpgradeRun
from upgrades.node_machine import KEPT_MESSAGE

from .conftest import drive

pytestmark = pytest.mark.django_db
TARGET = "595.71.05"


def start(context, pool, **strategy):
    return services.create_run(
        context=context, pool=pool, target_release=DriverRelease.objects.get(version=TARGET), **strategy
    )


def test_run_upgrades_every_node_and_replaces_claims(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=4, claims=5)
    run = drive(start(context, pool, max_unavailable="50%", canary_nodes=1))
    assert run.status == "completed" and run.max_unavailable_seen <= 2
    assert set(run.nodes.values_list("state", flat=True)) == {"upgrade-done"}
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", "cordoned")) == {(TARGET, False)}
    assert set(SimNode.objects.filter(pool=pool.name).values_list("driver_version", flat=True)) == {TARGET}
    pool.refresh_from_db()
    assert pool.driver_release.version == TARGET
    claims = Claim.objects.filter(cluster=pool.cluster)
    assert claims.count() == 5 and all(c.status == "allocated" or c.pending_reason for c in claims)
    # While two of four nodes were out, 4 GPUs held 5 claims: one waited with its reason. The placement
    # pass each uncordon queues (on commit, so not inside this test's transaction) places it again.
    pending = claims.filter(status="pending").count()
    assert pending >= 1 and claims_service.place_pending(pool.cluster_id) == pending
    assert claims.filter(status="allocated").count() == 5
    reasons = set(run.history.values_list("reason", flat=True))
    assert {
        "Created",
        "Started",
        "Cordoned",
        "ClaimsEvicted",
        "Validated",
        "Upgraded",
        "AllNodesUpgraded",
    } <= reasons


def test_node_cordoned_before_the_run_stays_cordoned(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=3)
    first = Node.objects.filter(pool=pool).order_by("name").first()
    SimNode.objects.filter(name=first.name).update(unschedulable=True)
    Node.objects.filter(pk=first.pk).update(cordoned=True)
    run = drive(start(context, pool, max_unavailable="2"))
    assert run.status == "completed" and run.max_unavailable_seen == 2
    assert dict(Node.objects.filter(pool=pool).values_list("name", "cordoned")) == {
        n.name: n.pk == first.pk for n in Node.objects.filter(pool=pool)
    }


def test_nodes_already_unavailable_count_against_the_budget(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=3)
    first = Node.objects.filter(pool=pool).order_by("name").first()
    Node.objects.filter(pk=first.pk).update(cordoned=True)
    run = start(context, pool, max_unavailable="1")
    for _ in range(12):
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    run.refresh_from_db()
    assert (run.status, run.reason) == ("running", "Blocked") and "maxUnavailable 1" in run.message
    assert dict(run.nodes.values_list("name", "state")) == {
        n.name: "upgrade-done" if n.pk == first.pk else "upgrade-required"
        for n in Node.objects.filter(pool=pool)
    }


def test_failed_install_keeps_the_node_cordoned_pauses_and_retry_finishes(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=3, claims=5)  # 6 GPUs: with one node out, one claim waits
    victim = Node.objects.filter(pool=pool).order_by("name")[1]
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="1", failure_budget=1))
    assert (run.status, run.reason) == ("paused", "FailureBudgetExhausted")
    row = run.nodes.get(name=victim.name)
    assert (row.state, row.reason, row.driver_touched) == ("upgrade-failed", "DriverInstallFailed", True)
    assert row.message.startswith("DkmsBuildFailed") and row.message.endswith(KEPT_MESSAGE)
    victim.refresh_from_db()
    assert victim.cordoned and victim.driver_version == "580.105.08"  # out of service, old driver
    # the waiting claim would fit on it, yet a placement pass leaves it waiting with its reason
    assert claims_service.place_pending(pool.cluster_id) == 0
    assert not Allocation.objects.filter(node=victim).exists()
    assert Claim.objects.filter(status="pending").exclude(pending_reason="").count() == 1
    run = drive(services.control(run, "retry"))
    assert run.status == "completed"
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", "cordoned")) == {(TARGET, False)}
    assert run.nodes.filter(driver_touched=True).count() == 0
    assert claims_service.place_pending(pool.cluster_id) == 1  # the node is back: the claim fits


def test_the_uncordon_policy_puts_a_failed_node_back_into_service(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=3)
    victim = Node.objects.filter(pool=pool).order_by("name")[1]
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="1", failure_budget=1, failed_nodes="uncordon"))
    assert (run.status, run.reason, run.failed_nodes) == ("paused", "FailureBudgetExhausted", "uncordon")
    assert not Node.objects.get(pk=victim.pk).cordoned  # back in service, on its old driver
    assert KEPT_MESSAGE not in run.nodes.get(name=victim.name).message


def test_unhealthy_gpu_after_install_fails_validation_and_stays_cordoned(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=2)
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="validate", target=victim.name)
    run = drive(start(context, pool, max_unavailable="2", failure_budget=5, validation_timeout_s=0))
    assert (run.status, run.reason, run.message) == (
        "failed",
        "NodesFailed",
        "1 of 2 nodes failed; 1 node kept cordoned (driver not validated): retry or roll back.",
    )
    assert run.nodes.get(name=victim.name).reason == "ValidationFailed"
    assert list(Node.objects.filter(pool=pool, cordoned=True)) == [victim]


@pytest.mark.parametrize("failed_nodes", ["keep-cordoned", "uncordon"])
def test_random_failures_end_visibly(context, make_upgrade_pool, monkeypatch, failed_nodes):
    monkeypatch.setenv("NVKE_SIM_DRIVER_FAILURE_RATE", "0.4")
    pool = make_upgrade_pool(nodes=8, claims=6)
    run = drive(start(context, pool, max_unavailable="25%", failure_budget=100, failed_nodes=failed_nodes))
    assert run.status in ("completed", "failed")
    # kept nodes may hold the whole budget (2 of 8): the run then ends with nodes not started
    waiting = ("upgrade-required",) if run.reason == "FailedNodesHoldBudget" else ()
    for row in run.nodes.all():
        node = Node.objects.get(name=row.name)
        assert row.state in ("upgrade-done", "upgrade-failed", *waiting)
        assert node.cordoned == (row.state == "upgrade-failed" and failed_nodes == "keep-cordoned")
        assert (node.driver_version == TARGET) == (row.state == "upgrade-done")
    assert all(c.status == "allocated" or c.pending_reason for c in Claim.objects.all())


def test_resumed_past_a_failure_that_holds_the_budget_the_run_ends_and_retry_finishes_it(
    context, make_upgrade_pool
):
    pool = make_upgrade_pool(nodes=3)
    first = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=first.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="1", failure_budget=1))
    assert (run.status, run.reason) == ("paused", "FailureBudgetExhausted")
    run = drive(services.control(run, "resume"))  # settles: no endless Blocked ticking
    assert (run.status, run.reason, run.finished_at is not None) == ("failed", "FailedNodesHoldBudget", True)
    assert run.message == (
        "Failed nodes kept cordoned (1) hold the whole maxUnavailable budget (1); "
        "2 nodes not upgraded. Retry or roll back."
    )
    assert sorted(run.nodes.values_list("state", flat=True)) == [
        "upgrade-failed",
        "upgrade-required",
        "upgrade-required",
    ]
    run = drive(services.control(run, "retry"))  # the failed node goes first (costs nothing), then the rest
    assert run.status == "completed"
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", "cordoned")) == {(TARGET, False)}


def test_abort_leaves_a_kept_node_cordoned_and_rollback_reinstalls_and_uncordons_it(
    context, make_upgrade_pool
):
    pool = make_upgrade_pool(nodes=3, claims=2)
    nodes = list(Node.objects.filter(pool=pool).order_by("name"))
    SimFault.objects.create(operation="install_driver", target=nodes[1].name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="1", failure_budget=1))
    assert [r.state for r in run.nodes.order_by("name")] == [
        "upgrade-done",
        "upgrade-failed",
        "upgrade-required",
    ]
    run = services.control(run, "abort")
    assert run.message.endswith("; failed nodes kept cordoned (driver not validated): 1.")
    run = drive(run)
    assert (run.status, run.message) == (
        "aborted",
        "The run was aborted; 1 node kept cordoned (driver not validated): retry or roll back.",
    )
    assert list(Node.objects.filter(pool=pool, cordoned=True)) == [nodes[1]]

    back = services.control(run, "rollback", context=context)
    row = back.nodes.get(name=nodes[1].name)
    # it still reports the old driver, but its install failed: it is reinstalled, and its cordon is ours
    assert (row.state, row.reason, row.pre_cordoned, row.driver_touched) == (
        "upgrade-required",
        "CordonedByEarlierRun",
        False,
        True,
    )
    assert back.nodes.get(name=nodes[2].name).reason == "AlreadyOnTarget"
    back = drive(back)
    assert back.status == "completed"
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", "cordoned")) == {
        ("580.105.08", False)
    }
    assert SimNode.objects.get(name=nodes[1].name).driver_failure == ""  # reinstalled cleanly
    assert back.history.filter(node=nodes[1].name, reason="Validated").exists()


def test_retry_of_a_run_a_later_run_took_over_is_refused(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=2)
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="1", failure_budget=5))
    assert run.status == "failed"
    back = drive(services.control(run, "rollback", context=context))
    assert back.status == "completed" and not Node.objects.filter(pool=pool, cordoned=True).exists()
    with pytest.raises(Conflict) as refused:
        services.control(run, "retry")
    assert refused.value.code == "cannot_retry" and "a later run" in refused.value.message


def test_abort_leaves_no_node_cordoned_by_the_run(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=4, claims=2)
    run = start(context, pool, max_unavailable="2")
    for _ in range(3):  # two nodes cordoned and being drained
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    assert Node.objects.filter(pool=pool, cordoned=True).count() == 2
    run = drive(services.control(run, "abort"))
    assert run.status == "aborted"
    assert not Node.objects.filter(pool=pool, cordoned=True).exists()
    assert set(run.nodes.values_list("state", flat=True)) <= {"upgrade-required", "upgrade-done"}


def test_rollback_returns_the_pool_to_its_previous_release(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=2)
    run = drive(start(context, pool, max_unavailable="1"))
    back = drive(services.control(run, "rollback", context=context))
    assert (back.status, back.rollback_of_id, back.target_release.version) == (
        "completed",
        run.pk,
        "580.105.08",
    )
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", flat=True)) == {"580.105.08"}


def test_a_stale_tick_does_nothing(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=2)
    run = start(context, pool)
    assert tick(run.pk, run.tick_seq) == run.tick_seq + 1
    assert tick(run.pk, run.tick_seq) is None  # the same number again: another chain already ran it
    assert UpgradeRun.objects.get(pk=run.pk).tick_seq == run.tick_seq + 1


def test_a_node_that_cannot_be_cordoned_fails_and_the_run_goes_on(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=3)
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(
        operation="cordon", target=victim.name, reason="ApiServerTimeout", message="timed out"
    )
    run = drive(start(context, pool, max_unavailable="1", failure_budget=2))
    assert (run.status, run.reason) == ("failed", "NodesFailed")
    row = run.nodes.get(name=victim.name)
    assert (row.state, row.reason, row.message) == ("upgrade-failed", "ApiServerTimeout", "timed out")
    assert not Node.objects.filter(pool=pool, cordoned=True).exists()
    assert run.nodes.filter(state="upgrade-done").count() == 2


def test_an_uncordon_that_fails_is_retried_before_the_run_ends(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    node = Node.objects.get(pool=pool)
    SimFault.objects.create(operation="uncordon", target=node.name, reason="Conflict", remaining=2)
    run = drive(start(context, pool))
    assert run.status == "completed" and not Node.objects.get(pool=pool).cordoned
    assert run.history.filter(type="NodeRetry", reason="Conflict").count() == 2


def test_nodes_added_by_a_scale_up_mid_run_join_it(context, make_upgrade_pool):
    from nodepools.services import reconcile

    pool = make_upgrade_pool(nodes=2)
    run = start(context, pool, max_unavailable="1")
    tick(run.pk, run.tick_seq)
    pool.node_count = 3
    pool.save()
    reconcile(pool.pk)  # the new node comes up on the pool's current release
    run = drive(run)
    assert run.status == "completed" and run.nodes.count() == 3
    assert run.nodes.filter(reason="Upgraded").count() == 3
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", flat=True)) == {TARGET}


def test_a_paused_run_keeps_saying_why_while_its_last_nodes_finish(context, make_upgrade_pool):
    """The failure budget pauses the run while another node is still upgrading; the ticks that finish
    that node must not wipe the pause's reason from the run."""
    pool = make_upgrade_pool(nodes=4, claims=2)
    victim = Node.objects.filter(pool=pool).order_by("name")[0]
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="2", failure_budget=1))
    assert run.nodes.filter(state="upgrade-done").exists()  # the other node in flight finished
    assert (run.status, run.reason) == ("paused", "FailureBudgetExhausted"), run.message
