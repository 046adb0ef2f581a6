"""Returning a node an upgrade run keeps cordoned to service: the API action, every refusal, tenancy and
roles, the audit entry and the websocket event, the allocator placing claims on it again, and what
the run (its later ticks, a retry, the pool's next run) does with it afterwards."""

import pytest

from audit.models import AuditEntry
from catalog.models import DriverRelease
from claims import allocator as claims_service
from claims.models import Allocation, Claim
from nodepools.models import Node
from nvke.providers.simulator.models import SimFault, SimNode
from upgrades import services
from upgrades.models import UpgradeRun

from .conftest import drive

pytestmark = pytest.mark.django_db
TARGET = "595.71.05"


def start(context, pool, **strategy):
    return services.create_run(
        context=context, pool=pool, target_release=DriverRelease.objects.get(version=TARGET), **strategy
    )


def uncordon(client, run_id: int, name: str):
    return client.post(f"/api/v1/upgrades/{run_id}/nodes/{name}/uncordon/")


@pytest.fixture
def kept(context, make_upgrade_pool):
    """A finished run of a 3-node pool (2 GPUs each) whose middle node failed its install and is kept
    cordoned; the other two run the target. Returns (run, victim node)."""
    pool = make_upgrade_pool(nodes=3)
    victim = Node.objects.filter(pool=pool).order_by("name")[1]
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="2", failure_budget=5))
    assert (run.status, run.reason, run.nodes.get(name=victim.name).kept_cordoned) == (
        "failed",
        "NodesFailed",
        True,
    )
    assert Node.objects.get(pk=victim.pk).cordoned
    return run, victim


def test_return_to_service_uncordons_the_node_and_the_allocator_places_claims_on_it(
    api, owner, context, kept, monkeypatch
):
    run, victim = kept
    sent = []
    monkeypatch.setattr(
        "upgrades.events.broadcast", lambda tenant, event, cluster_id=None: sent.append(event)
    )
    placements = []
    monkeypatch.setattr("claims.allocator.request_placement", placements.append)
    # four claims fill the two upgraded nodes; a fifth waits: the kept node is not schedulable
    for i in range(5):
        claims_service.create_claim(
            context=context, cluster=run.pool.cluster, name=f"job-{i}", kind="whole", gpus=1
        )
    assert Claim.objects.filter(status="pending").count() == 1
    assert claims_service.place_pending(run.pool.cluster_id) == 0

    response = uncordon(api, run.pk, victim.name)

    assert response.status_code == 200, response.data
    row = next(n for n in response.data["nodes"] if n["name"] == victim.name)
    assert (row["state"], row["kept_cordoned"], row["driver_touched"]) == ("upgrade-failed", False, False)
    assert row["returned_at"] is not None and row["reason"] == "ReturnedToService"
    assert row["message"] == (
        f"Returned to service by {owner.username}, not validated: it runs driver "
        f"580.105.08 as it is (target {TARGET})."
    )
    # it counts as failed in the run's totals, and the run's message says what became of it
    assert response.data["status"] == "failed"
    assert response.data["message"] == "1 of 3 nodes failed; 1 node returned to service unvalidated."
    assert not Node.objects.get(pk=victim.pk).cordoned
    assert not SimNode.objects.get(name=victim.name).unschedulable  # the provider uncordoned it
    # schedulable for the allocator (its inventory was reset) and a placement pass was asked for
    assert placements == [run.pool.cluster_id]
    assert claims_service.place_pending(run.pool.cluster_id) == 1
    assert Allocation.objects.filter(node=victim).count() == 1
    # the run's websocket events tell the change like any other node state change
    assert [e for e in sent if e["type"] == "upgrade.node"] == [
        {
            "type": "upgrade.node",
            "run": run.pk,
            "pool": run.pool_id,
            "cluster": run.pool.cluster_id,
            "node": victim.name,
            "state": "upgrade-failed",
            "reason": "ReturnedToService",
            "message": row["message"],
        }
    ]
    assert run.history.filter(node=victim.name, reason="ReturnedToService").count() == 1


def test_return_to_service_is_audited_as_the_person_who_did_it(kept, make_member, client_for):
    run, victim = kept
    member = make_member("acme", "member")  # members control runs (retry, rollback): this too
    assert uncordon(client_for(member, token=True), run.pk, victim.name).status_code == 200
    entry = AuditEntry.objects.get(object_type="upgrades.upgradenode")
    assert (entry.tenant_id, entry.actor_user_id, entry.action) == (run.tenant_id, member.pk, "update")
    assert entry.actor.startswith(f"{member.username} (token test ")
    assert entry.object_repr == f"{victim.name} in run #{run.pk}: upgrade-failed"
    assert entry.changes["cordoned"] == [True, False] and entry.changes["driver_touched"] == [True, False]
    assert entry.changes["returned_at"][0] is None and entry.changes["returned_at"][1]


@pytest.mark.parametrize("who, status", [("viewer", 403), ("read-only token", 403), ("stranger", 404)])
def test_viewers_read_only_tokens_and_other_tenants_are_refused(
    kept, owner, make_member, client_for, who, status
):
    from rest_framework.test import APIClient

    from nvke.tenancy.models import ApiToken

    run, victim = kept
    if who == "viewer":
        client = client_for(make_member("acme", "viewer"))
    elif who == "stranger":
        client = client_for(make_member("globex", "owner"))
    else:
        _, raw = ApiToken.issue(tenant=run.tenant, user=owner, name="ro", scope="read-only")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert uncordon(client, run.pk, victim.name).status_code == status
    assert Node.objects.get(pk=victim.pk).cordoned and run.nodes.get(name=victim.name).kept_cordoned
    assert not AuditEntry.objects.filter(object_type="upgrades.upgradenode").exists()


def refused(response, status: int, code: str, node: str) -> None:
    assert (response.status_code, response.data["code"]) == (status, code), response.data
    assert response.data["details"]["field"] == "node" and node in response.data["message"]


def test_names_not_in_the_run_nodes_not_kept_and_a_second_return_are_refused(api, kept):
    run, victim = kept
    refused(uncordon(api, run.pk, "no-such-node"), 404, "unknown_node", "'no-such-node'")
    done = run.nodes.exclude(name=victim.name).first()
    response = uncordon(api, run.pk, done.name)
    refused(response, 409, "not_kept_cordoned", done.name)
    assert (response.data["details"]["node"], response.data["details"]["state"]) == (
        done.name,
        "upgrade-done",
    )
    assert uncordon(api, run.pk, victim.name).status_code == 200
    refused(uncordon(api, run.pk, victim.name), 409, "not_kept_cordoned", victim.name)
    assert "returned to service already" in uncordon(api, run.pk, victim.name).data["message"]


def test_a_node_the_run_is_still_moving_is_refused(api, context, make_upgrade_pool):
    from upgrades.controller import tick

    pool = make_upgrade_pool(nodes=2)
    run = start(context, pool, max_unavailable="1")
    for _ in range(2):
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    moving, waiting = run.nodes.order_by("name")
    assert moving.state == "wait-for-jobs-required" and Node.objects.get(name=moving.name).cordoned
    refused(uncordon(api, run.pk, moving.name), 409, "node_in_flight", moving.name)
    refused(uncordon(api, run.pk, waiting.name), 409, "node_in_flight", waiting.name)  # queued
    assert Node.objects.get(name=moving.name).cordoned


def test_under_the_uncordon_policy_a_failed_node_is_already_in_service(api, context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=2)
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, failure_budget=5, failed_nodes="uncordon"))
    refused(uncordon(api, run.pk, victim.name), 409, "not_kept_cordoned", victim.name)


def test_a_node_cordoned_before_the_run_keeps_that_cordon(api, context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=2)
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimNode.objects.filter(name=victim.name).update(unschedulable=True)
    Node.objects.filter(pk=victim.pk).update(cordoned=True)
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="2", failure_budget=5))
    assert run.nodes.get(name=victim.name).state == "upgrade-failed"
    refused(uncordon(api, run.pk, victim.name), 409, "cordoned_before_run", victim.name)
    assert Node.objects.get(pk=victim.pk).cordoned


def test_a_run_whose_nodes_a_later_run_took_over_refuses(api, context, kept):
    run, victim = kept
    services.control(run, "rollback", context=context)  # the new run holds the kept cordon now
    refused(uncordon(api, run.pk, victim.name), 409, "taken_over", victim.name)
    assert Node.objects.get(pk=victim.pk).cordoned


def test_a_node_that_left_the_pool_is_refused(api, kept):
    run, victim = kept
    Node.objects.filter(pk=victim.pk).delete()
    refused(uncordon(api, run.pk, victim.name), 409, "node_gone", victim.name)


def test_a_provider_that_cannot_uncordon_changes_nothing(api, kept):
    run, victim = kept
    SimFault.objects.create(operation="uncordon", target=victim.name, reason="ApiServerDown", message="503")
    response = uncordon(api, run.pk, victim.name)
    refused(response, 502, "provider_error", victim.name)
    assert response.data["details"]["reason"] == "ApiServerDown"
    assert Node.objects.get(pk=victim.pk).cordoned and run.nodes.get(name=victim.name).kept_cordoned
    assert not AuditEntry.objects.filter(object_type="upgrades.upgradenode").exists()
    SimFault.objects.all().delete()
    assert uncordon(api, run.pk, victim.name).status_code == 200


def test_a_paused_run_whose_kept_node_is_returned_goes_on_and_never_touches_it(
    api, context, make_upgrade_pool
):
    """The kept node held the whole budget (1): resumed, the run would end FailedNodesHoldBudget. Once
    it is back in service the budget is free, the rest of the pool upgrades, and every tick leaves the
    returned node uncordoned (drive checks the invariants after each)."""
    pool = make_upgrade_pool(nodes=3)
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="1", failure_budget=1))
    assert (run.status, run.reason) == ("paused", "FailureBudgetExhausted")
    assert uncordon(api, run.pk, victim.name).status_code == 200  # a paused run: allowed
    run = drive(services.control(run, "resume"))
    assert (run.status, run.reason, run.message) == (
        "failed",
        "NodesFailed",
        "1 of 3 nodes failed; 1 node returned to service unvalidated.",
    )
    assert sorted(run.nodes.values_list("name", "state")) == [
        (victim.name, "upgrade-failed"),
        *((n.name, "upgrade-done") for n in Node.objects.filter(pool=pool).exclude(pk=victim.pk)),
    ]
    assert not Node.objects.filter(pool=pool, cordoned=True).exists()
    moves = run.history.filter(node=victim.name).order_by("id").values_list("reason", flat=True)
    assert list(moves)[-1] == "ReturnedToService"  # nothing happened to it since


def test_a_retry_takes_a_returned_node_through_the_upgrade_again(api, context, kept):
    run, victim = kept
    assert uncordon(api, run.pk, victim.name).status_code == 200
    SimFault.objects.all().delete()  # repaired
    run = drive(services.control(run, "retry"))
    row = run.nodes.get(name=victim.name)
    assert (run.status, row.state, row.returned_at, row.driver_touched) == (
        "completed",
        "upgrade-done",
        None,
        False,
    )
    assert Node.objects.get(pk=victim.pk).driver_version == TARGET


def test_the_pools_next_run_reinstalls_a_returned_node_whatever_it_reports(api, context, kept):
    run, victim = kept
    assert uncordon(api, run.pk, victim.name).status_code == 200
    back = services.control(UpgradeRun.objects.get(pk=run.pk), "rollback", context=context)
    row = back.nodes.get(name=victim.name)
    # it reports the rollback's target already, but no run validated it: reinstalled, in service till then
    assert Node.objects.get(pk=victim.pk).driver_version == back.target_release.version
    assert (row.state, row.driver_touched, row.pre_cordoned) == ("upgrade-required", False, False)
    back = drive(back)
    assert back.status == "completed" and back.history.filter(node=victim.name, reason="Validated").exists()


def test_a_cordon_from_outside_on_a_returned_node_is_left_alone(api, context, make_upgrade_pool):
    """Returned, the node is no longer the run's: if someone cordons it again (kubectl), the run must not
    take that cordon away as it does for the nodes it gave back itself."""
    pool = make_upgrade_pool(nodes=3)
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    run = drive(start(context, pool, max_unavailable="2", failure_budget=1))
    assert run.status == "paused" and run.history.filter(reason="FailureBudgetExhausted").exists()
    assert uncordon(api, run.pk, victim.name).status_code == 200
    SimNode.objects.filter(name=victim.name).update(unschedulable=True)
    Node.objects.filter(pk=victim.pk).update(cordoned=True)
    run = drive(services.control(run, "resume"))
    assert (run.status, run.reason) == ("failed", "NodesFailed")
    assert Node.objects.get(pk=victim.pk).cordoned and SimNode.objects.get(name=victim.name).unschedulable
    assert list(Node.objects.filter(pool=pool, cordoned=True)) == [victim]
