"""Training-aware deferral (issue 18 item 4): a pool's policy keeps a driver upgrade from draining a node
while it runs a training claim, or any node while the pool's GPUs are busy, up to a deadline after which
the upgrade proceeds or stops; the run's node says what it waits for."""

import datetime
from dataclasses import replace

import pytest
from django.utils import timezone

from catalog.models import DriverRelease
from claims import allocator
from claims.models import Allocation
from nodepools.models import NodePool
from nvke.tenancy.context import TenantContext
from upgrades import services
from upgrades.controller import tick
from upgrades.node_machine import State, plan
from upgrades.run_lifecycle import Phase
from upgrades.strategy import Strategy

from .conftest import drive
from .test_machine import RUN, node

pytestmark = pytest.mark.django_db
TARGET = "595.71.05"
STRATEGY = Strategy(max_unavailable=1, drain_timeout_s=60, validation_timeout_s=100)


def url(pool) -> str:
    return f"/api/v1/node-pools/{pool.pk}/upgrade-deferral/"


@pytest.mark.parametrize(
    "deadline_s, stops, now, expected",
    [
        (600, False, 100, (State.WAIT_FOR_JOBS_REQUIRED, "Deferred")),
        (600, False, 600, (State.POD_DELETION_REQUIRED, "NoBlockingJobs")),
        (600, True, 600, (State.FAILED, "DeferralDeadline")),
    ],
)
def test_a_deferred_node_waits_until_the_deadline_then_proceeds_or_stops(deadline_s, stops, now, expected):
    waiting = node(
        State.WAIT_FOR_JOBS_REQUIRED, cordoned=True, claims=1, deferred_by="training claim ml/train to end"
    )
    run = replace(RUN, deferral_deadline_s=deadline_s, deferral_stops=stops)
    (step,) = plan(run, [waiting], STRATEGY, now).steps
    assert (step.to, step.reason) == expected
    if step.reason == "Deferred":
        assert "Waiting for training claim ml/train to end before draining" in step.message
    assert plan(run, [replace(waiting, deferred_by="")], STRATEGY, now).steps[0].reason == "NoBlockingJobs"


def test_the_policy_is_set_read_and_removed_through_the_api(api, make_upgrade_pool, make_member, client_for):
    pool = make_upgrade_pool(nodes=1)
    assert api.get(url(pool)).json() == {
        "enabled": False,
        "training_claims": True,
        "claims_older_than_s": None,
        "utilization_above_percent": None,
        "deadline_s": 86400,
        "after_deadline": "proceed",
    }
    body = {
        "training_claims": True,
        "claims_older_than_s": 3600,
        "utilization_above_percent": 80,
        "deadline_s": 7200,
        "after_deadline": "stop",
    }
    assert api.put(url(pool), body, format="json").json() == {"enabled": True, **body}
    refused = api.put(url(pool), {**body, "deadline_s": 5}, format="json")
    assert refused.status_code == 400 and refused.json()["message"].startswith("deadline_s")
    assert api.get(url(pool)).json()["deadline_s"] == 7200  # unchanged
    assert client_for(make_member("globex", "owner")).get(url(pool)).status_code == 404
    assert api.delete(url(pool)).status_code == 204 and api.get(url(pool)).json()["enabled"] is False


def test_an_upgrade_waits_for_the_training_claim_then_goes_on_when_it_ends(api, owner, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=2)
    context = TenantContext(owner.memberships.get().tenant, "owner")
    train = allocator.create_claim(
        context=context,
        cluster=pool.cluster,
        name="train",
        namespace="ml",
        kind="whole",
        gpus=1,
        training=True,
    )
    serve = allocator.create_claim(context=context, cluster=pool.cluster, name="serve", kind="whole", gpus=1)
    training_node = Allocation.objects.get(claim=train).node.name
    assert api.put(url(pool), {"deadline_s": 3600}, format="json").status_code == 200
    run = services.create_run(
        context=context,
        pool=pool,
        target_release=DriverRelease.objects.get(version=TARGET),
        max_unavailable="1",
    )
    for _ in range(40):  # the other node is upgraded; the training one waits
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    waiting = run.nodes.get(name=training_node)
    assert (waiting.state, waiting.reason) == (State.WAIT_FOR_JOBS_REQUIRED, "Deferred")
    assert "training claim ml/train" in waiting.message
    assert Allocation.objects.filter(claim=train, node__name=training_node).exists()  # never moved
    assert run.nodes.exclude(name=training_node).get().state == State.DONE
    assert Allocation.objects.filter(claim=serve).exists()

    allocator.release_claim(train)
    assert drive(run).status == Phase.COMPLETED


def test_nodes_running_deferred_claims_start_last():
    nodes = [
        node(State.UPGRADE_REQUIRED, name="a", deferred_by="training claim ml/train to end"),
        node(State.UPGRADE_REQUIRED, name="b"),
    ]
    assert [s.node for s in plan(RUN, nodes, STRATEGY, 0).steps] == ["b"]


def test_an_upgrade_waits_while_the_pools_gpus_are_busy_and_goes_on_when_they_calm_down(
    api, owner, make_upgrade_pool
):
    pool = make_upgrade_pool(nodes=2)
    context = TenantContext(owner.memberships.get().tenant, "owner")
    assert api.put(url(pool), {"utilization_above_percent": 80}, format="json").status_code == 200
    NodePool.objects.filter(pk=pool.pk).update(gpu_utilization=92.4, gpu_utilization_at=timezone.now())
    run = services.create_run(
        context=context,
        pool=pool,
        target_release=DriverRelease.objects.get(version=TARGET),
        max_unavailable="1",
    )
    for _ in range(20):
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    held = run.nodes.exclude(state=State.UPGRADE_REQUIRED).get()
    assert (held.state, held.reason) == (State.WAIT_FOR_JOBS_REQUIRED, "Deferred")
    assert "the pool's GPU utilization (92% over the last minute) to drop to 80%" in held.message
    assert run.nodes.filter(state=State.UPGRADE_REQUIRED).count() == 1  # the budget: one node out

    stale = timezone.now() - datetime.timedelta(minutes=10)  # telemetry stopped: its figure says nothing
    NodePool.objects.filter(pk=pool.pk).update(gpu_utilization_at=stale)
    assert drive(run).status == Phase.COMPLETED
