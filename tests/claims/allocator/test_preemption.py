"""Preemption through the API: a pending claim or group of higher priority takes the GPUs of the fewest
lower-priority claims, never non-preemptible ones; victims go back to pending (not deleted), say who
took their GPUs, and are in the audit log; groups are taken and take as units."""

import asyncio
import datetime

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db.models import F

from audit.models import AuditEntry
from claims.allocator import place_pending, release_claim
from claims.models import Claim
from nodepools.services import reconcile
from nvke import realtime

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(owner, make_cluster):
    return make_cluster(owner.memberships.get().tenant, "prod")


@pytest.fixture
def make_h100(cluster, make_pool):
    def make(nodes: int):
        pool = make_pool(cluster, name="h100", gpu_model="h100-sxm5-80gb", nodes=nodes, gpus_per_node=8)
        reconcile(pool.pk)
        return pool

    return make


def claim(api, cluster, name, gpus, **fields):
    body = {"cluster": cluster.pk, "name": name, "kind": "whole", "gpus": gpus, **fields}
    return api.post("/api/v1/claims/", body, format="json")


def group(api, cluster, name, members, gpus=8, priority=0, **template):
    body = {
        "cluster": cluster.pk,
        "name": name,
        "members": members,
        "priority": priority,
        "template": {"kind": "whole", "gpus": gpus, **template},
    }
    return api.post("/api/v1/claim-groups/", body, format="json")


def status(name: str) -> str:
    return Claim.objects.get(name=name).status


def test_a_higher_priority_claim_takes_the_gpus_and_the_victim_waits(api, cluster, make_h100):
    make_h100(1)
    assert claim(api, cluster, "train", 8).data["status"] == "allocated"
    response = claim(api, cluster, "infer", 8, priority=10)
    assert response.status_code == 201
    assert response.data["status"] == "allocated"
    victim = api.get(f"/api/v1/claims/{Claim.objects.get(name='train').pk}/").data
    assert (victim["status"], victim["allocation"]) == ("pending", None)  # re-queued, not deleted
    assert victim["preempted_by"] == "default/infer"
    assert victim["preempted_at"] is not None
    assert victim["pending_reason"].startswith("Preempted by claim default/infer (priority 10)")
    entry = AuditEntry.objects.filter(object_repr="default/train", action="update").latest("pk")
    assert entry.changes["preempted_by"] == [None, "default/infer"]
    # Waiting, it gets its GPUs back once they free.
    release_claim(Claim.objects.get(name="infer"))
    place_pending(cluster.pk)
    assert status("train") == "allocated"


def test_equal_priority_and_non_preemptible_claims_are_never_taken(api, cluster, make_h100):
    make_h100(1)
    assert claim(api, cluster, "pinned", 4, preemptible=False).data["status"] == "allocated"
    assert claim(api, cluster, "peer", 4, priority=5).data["status"] == "allocated"
    response = claim(api, cluster, "urgent", 4, priority=5)
    assert response.data["status"] == "pending"
    assert (status("pinned"), status("peer")) == ("allocated", "allocated")
    assert claim(api, cluster, "more-urgent", 4, priority=9).data["status"] == "allocated"
    assert (status("pinned"), status("peer")) == ("allocated", "pending")


def test_the_fewest_victims_then_the_fewest_gpus(api, cluster, make_h100):
    make_h100(1)
    for name, gpus in [("a", 4), ("b", 2), ("c", 1), ("d", 1)]:
        assert claim(api, cluster, name, gpus).data["status"] == "allocated"
    assert claim(api, cluster, "two", 2, priority=1).data["status"] == "allocated"
    assert [c.name for c in Claim.objects.filter(status="pending")] == ["b"]  # not c and d, nor a
    assert claim(api, cluster, "one", 1, priority=1).data["status"] == "allocated"
    assert sorted(c.name for c in Claim.objects.filter(status="pending")) == ["b", "d"]  # d: the newest


def test_a_group_is_preempted_as_a_unit(api, cluster, make_h100):
    make_h100(2)
    assert group(api, cluster, "train", 2).data["status"] == "placed"
    assert claim(api, cluster, "infer", 8, priority=10).data["status"] == "allocated"
    members = Claim.objects.filter(group__name="train")
    assert {m.status for m in members} == {"pending"}  # the node left free is not held by half a gang
    assert {m.preempted_by.name for m in members} == {"infer"}


def test_a_group_preempts_only_when_its_whole_minimum_then_fits(api, cluster, make_h100):
    make_h100(2)
    assert claim(api, cluster, "free-to-take", 8).data["status"] == "allocated"
    assert claim(api, cluster, "pinned", 8, preemptible=False).data["status"] == "allocated"
    data = group(api, cluster, "llm", 2, priority=10).data
    assert (data["status"], data["placed"]) == ("pending", 0)
    assert status("free-to-take") == "allocated"  # taking it would not have made room for the gang
    release_claim(Claim.objects.get(name="pinned"))
    assert claim(api, cluster, "low", 8).data["status"] == "allocated"
    place_pending(cluster.pk)
    assert (status("free-to-take"), status("low")) == ("pending", "pending")
    assert {m.status for m in Claim.objects.filter(group__name="llm")} == {"allocated"}


def test_preemptible_is_checked_and_named(api, cluster, make_h100):
    make_h100(1)
    response = claim(api, cluster, "x", 1, preemptible="sometimes")
    assert response.status_code == 400
    assert response.data["message"].startswith("preemptible: ")
    response = group(api, cluster, "g", 1, preemptible="sometimes")
    assert response.status_code == 400
    assert response.data["message"].startswith("template.preemptible: ")
    assert claim(api, cluster, "y", 1).data["preemptible"] is True


def test_the_claim_page_says_who_preempted_it(api, client, owner, cluster, make_h100):
    make_h100(1)
    claim(api, cluster, "train", 8)
    claim(api, cluster, "infer", 8, priority=10)
    client.force_login(owner)
    victim, preemptor = Claim.objects.get(name="train"), Claim.objects.get(name="infer")
    page = client.get(f"/claims/{victim.pk}/").content.decode()
    assert f'Preempted by <a href="/claims/{preemptor.pk}/">default/infer</a> (priority 10)' in page
    assert "Preempted by" not in client.get(f"/claims/{preemptor.pk}/").content.decode()


def back(name: str, seconds: float) -> None:
    """Time passes for the claim (no sleep): it was placed and told `seconds` earlier."""
    shift = datetime.timedelta(seconds=seconds)
    Claim.objects.filter(name=name).update(
        preempted_at=F("preempted_at") - shift, allocated_at=F("allocated_at") - shift
    )


def test_with_a_grace_period_the_victim_is_told_and_keeps_its_gpus_until_it_ends(
    api, client, owner, cluster, make_h100, settings
):
    settings.NVKE_PREEMPTION_GRACE_S = 60
    make_h100(1)
    claim(api, cluster, "train", 8)
    data = claim(api, cluster, "infer", 8, priority=10).data
    assert data["status"] == "pending"
    assert data["pending_reason"].startswith("Preempting 1 claim of lower priority: their GPUs are taken at ")
    victim = api.get(f"/api/v1/claims/{Claim.objects.get(name='train').pk}/").data
    assert (victim["status"], victim["preempted_by"]) == ("allocated", "default/infer")
    client.force_login(owner)
    page = client.get(f"/claims/{victim['id']}/").content.decode()
    assert "To be preempted by" in page and "when its grace period ends at" in page
    place_pending(cluster.pk)  # within the grace: nothing moves
    assert (status("train"), status("infer")) == ("allocated", "pending")
    back("train", 61)
    place_pending(cluster.pk)
    assert (status("train"), status("infer")) == ("pending", "allocated")
    assert Claim.objects.get(name="train").pending_reason.startswith("Preempted by claim default/infer")


def test_a_notice_lapses_with_its_preemptor(api, cluster, make_h100, settings):
    settings.NVKE_PREEMPTION_GRACE_S = 60
    make_h100(1)
    claim(api, cluster, "train", 8)
    claim(api, cluster, "infer", 8, priority=10)
    release_claim(Claim.objects.get(name="infer"))  # it no longer waits: train keeps its GPUs
    back("train", 61)
    assert claim(api, cluster, "urgent", 8, priority=10).data["status"] == "pending"  # a fresh notice
    assert Claim.objects.get(name="train").preempted_by.name == "urgent"
    assert status("train") == "allocated"


def test_each_preemption_is_an_event_on_the_claims_stream(
    api, owner, cluster, make_h100, django_capture_on_commit_callbacks
):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(realtime.tenant_group(cluster.tenant_id), channel)
    make_h100(1)
    with django_capture_on_commit_callbacks(execute=True):
        claim(api, cluster, "train", 8)
        claim(api, cluster, "infer", 8, priority=10)
    realtime.flush()
    events = []
    while not any(e["type"] == "claim.preempted" for e in events):  # each message: a batch of events
        message = async_to_sync(asyncio.wait_for)(layer.receive(channel), timeout=10)
        events += message["events"]
    (preempted,) = [e for e in events if e["type"] == "claim.preempted"]
    assert (preempted["name"], preempted["status"]) == ("train", "pending")
    assert preempted["preempted_by"] == Claim.objects.get(name="infer").pk
