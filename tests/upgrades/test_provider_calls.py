"""Upgrade ticks call the provider after their transaction commits, from the intent recorded on each
node's row, and observe the result on the next tick: a call refused or lost after commit is made again,
never lost, and a drain blocked by a PodDisruptionBudget waits (and times out like any drain)."""

import pytest
from django.db import transaction

from catalog.models import DriverRelease
from clusters.services import cluster_ref
from nodepools.models import Node
from nvke.providers.simulator.models import SimFault, SimNode
from nvke.providers.simulator.provider import SimulatorOperations
from upgrades import controller, services
from upgrades.controller import tick
from upgrades.models import UpgradeNode

from .conftest import drive

TARGET = "595.71.05"
MUTATING = {"cordon", "uncordon", "drain", "install_driver"}


def start(context, pool, **strategy):
    return services.create_run(
        context=context, pool=pool, target_release=DriverRelease.objects.get(version=TARGET), **strategy
    )


class RecordingOperations(SimulatorOperations):
    """The simulator, noting each call and whether a transaction was open when it came."""

    calls: list[tuple[str, bool]] = []

    def _seen(self, call: str) -> None:
        self.calls.append((call, transaction.get_connection().in_atomic_block))

    def cordon(self, node):
        self._seen("cordon")
        super().cordon(node)

    def uncordon(self, node):
        self._seen("uncordon")
        super().uncordon(node)

    def drain(self, node):
        self._seen("drain")
        super().drain(node)

    def drain_status(self, node):
        self._seen("drain_status")
        return super().drain_status(node)

    def install_driver(self, node, version):
        self._seen("install_driver")
        super().install_driver(node, version)

    def driver_status(self, node):
        self._seen("driver_status")
        return super().driver_status(node)


def once(run):
    run.refresh_from_db()
    return tick(run.pk, run.tick_seq)


def row_of(run) -> UpgradeNode:
    return UpgradeNode.objects.get(run=run)


@pytest.mark.django_db(transaction=True)  # so that a tick's own transaction is the only one open
def test_every_provider_call_of_a_run_is_made_outside_any_transaction(
    context, make_upgrade_pool, monkeypatch
):
    pool = make_upgrade_pool(nodes=2, claims=2)
    RecordingOperations.calls = []
    monkeypatch.setattr(services, "schedule_tick", lambda *args: None)  # this test drives the ticks
    monkeypatch.setattr(
        controller, "cluster_operations", lambda cluster: RecordingOperations(cluster_ref(cluster))
    )
    run = drive(start(context, pool, max_unavailable="1"))
    assert run.status == "completed"
    made = {call for call, _ in RecordingOperations.calls}
    assert MUTATING | {"driver_status", "drain_status"} <= made
    inside = [call for call, in_transaction in RecordingOperations.calls if in_transaction]
    assert inside == [], f"called inside a transaction: {inside}"


@pytest.mark.django_db
def test_a_refused_uncordon_keeps_its_intent_and_the_next_tick_calls_again(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    node = Node.objects.get(pool=pool)
    SimFault.objects.create(operation="uncordon", target=node.name, reason="ApiServerDown", message="503")
    run = start(context, pool)
    while row_of(run).state != "upgrade-done":
        assert once(run) is not None
    row = row_of(run)
    assert row.cordon_wanted is False  # recorded and committed; the call after commit was refused
    assert row.call_error == {"call": "uncordon", "reason": "ApiServerDown", "message": "503"}
    assert SimNode.objects.get(name=node.name).unschedulable
    run.refresh_from_db()
    assert run.status == "running"  # a run does not end while the provider owes it a call

    assert once(run) is not None  # notes the refusal, then calls again: accepted
    row = row_of(run)
    assert (row.cordon_wanted, row.call_error) == (None, {})
    assert not SimNode.objects.get(name=node.name).unschedulable
    assert run.history.filter(type="NodeRetry", reason="ApiServerDown").count() == 1
    assert once(run) is None
    run.refresh_from_db()
    assert run.status == "completed"


@pytest.mark.django_db
def test_a_call_lost_after_commit_is_made_by_the_next_tick(context, make_upgrade_pool, monkeypatch):
    """A worker killed between the tick's commit and its provider call: the row still says what is
    wanted, the node waits for it, and the next tick makes the call."""
    pool = make_upgrade_pool(nodes=1)
    node = Node.objects.get(pool=pool)
    run = start(context, pool)
    once(run)  # upgrade-required → cordon-required
    with monkeypatch.context() as lost:
        lost.setattr(controller, "call_provider", lambda ops, run_id: None)
        once(run)  # cordon-required → wait-for-jobs-required, cordon recorded; the call never made
    assert (row_of(run).state, row_of(run).cordon_wanted) == ("wait-for-jobs-required", True)
    assert Node.objects.get(pk=node.pk).cordoned  # the allocator already stays off it
    assert not SimNode.objects.get(name=node.name).unschedulable  # the provider has not heard

    once(run)  # the node waits for its cordon (busy) and the tick makes the call
    assert (row_of(run).state, row_of(run).cordon_wanted) == ("wait-for-jobs-required", None)
    assert SimNode.objects.get(name=node.name).unschedulable
    run = drive(run)
    assert run.status == "completed" and not SimNode.objects.get(name=node.name).unschedulable


@pytest.mark.django_db
def test_a_drain_blocked_by_a_disruption_budget_waits_then_finishes(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1, claims=1)
    node = Node.objects.get(pool=pool)
    SimFault.objects.create(
        operation="drain", target=node.name, reason="DisruptionBudget", message="pdb allows 0", remaining=2
    )
    run = drive(start(context, pool))
    assert run.status == "completed"
    retries = run.history.filter(type="NodeRetry", reason="DisruptionBudget")
    assert list(retries.values_list("message", flat=True)) == ["pdb allows 0", "pdb allows 0"]
    assert SimNode.objects.get(name=node.name).driver_version == TARGET


@pytest.mark.django_db
def test_a_drain_blocked_past_the_drain_timeout_fails_the_node_back_into_service(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    node = Node.objects.get(pool=pool)
    SimFault.objects.create(operation="drain", target=node.name, reason="DisruptionBudget", remaining=100)
    run = start(context, pool)
    type(run).objects.filter(pk=run.pk).update(drain_timeout_s=0)
    run = drive(run)
    row = row_of(run)
    assert (row.state, row.reason, row.drain_wanted, row.driver_touched) == (
        "upgrade-failed",
        "DrainTimeout",
        False,
        False,
    )
    assert not Node.objects.get(pk=node.pk).cordoned and not SimNode.objects.get(name=node.name).unschedulable
    assert SimNode.objects.get(name=node.name).driver_version == "580.105.08"  # never installed


@pytest.mark.django_db
def test_a_node_gone_with_a_call_still_owed_lets_the_run_end(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    node = Node.objects.get(pool=pool)
    SimFault.objects.create(operation="uncordon", target=node.name, reason="ApiServerDown", remaining=100)
    run = start(context, pool)
    while row_of(run).state != "upgrade-done":
        assert once(run) is not None
    assert once(run) is not None  # still owed: the run goes on ticking
    Node.objects.filter(pk=node.pk).delete()  # scaled away meanwhile
    SimNode.objects.filter(name=node.name).delete()
    assert once(run) is None
    run.refresh_from_db()
    assert run.status == "completed" and row_of(run).cordon_wanted is None
