"""Queues through the API, on PostgreSQL: admission within nominal + borrowing limit, claims falling
to their namespace's queue, borrowing in a cohort, reclaim by preempting borrowed claims (whatever
their priority, never non-preemptible ones), priority only within a queue, groups admitted whole,
validation (400 naming the field), 409 on a duplicate, and other tenants' queues a 404."""

import pytest

from audit.models import AuditEntry
from claims.allocator import place_pending, release_claim
from claims.models import Claim, Queue
from nodepools.services import reconcile

pytestmark = pytest.mark.django_db

H100 = "h100-sxm5-80gb"


@pytest.fixture
def cluster(owner, make_cluster):
    return make_cluster(owner.memberships.get().tenant, "prod")


@pytest.fixture
def make_h100(cluster, make_pool):
    def make(nodes: int):
        reconcile(make_pool(cluster, name="h100", gpu_model=H100, nodes=nodes, gpus_per_node=8).pk)

    return make


def queue(api, cluster, name, gpus=8, cohort="", namespaces=(), **limits):
    body = {
        "cluster": cluster.pk,
        "name": name,
        "cohort": cohort,
        "namespaces": list(namespaces),
        "quotas": [{"gpu_model": H100, "gpus": gpus, **limits}],
    }
    return api.post("/api/v1/queues/", body, format="json")


def claim(api, cluster, name, gpus, **fields):
    body = {"cluster": cluster.pk, "name": name, "kind": "whole", "gpus": gpus, **fields}
    return api.post("/api/v1/claims/", body, format="json")


def status(name: str) -> str:
    return Claim.objects.get(name=name).status


def h100(data: dict) -> dict:
    return next(m for m in data["standing"]["models"] if m["gpu_model"] == H100)


def test_a_queue_admits_up_to_its_nominal_though_the_fleet_has_room(api, cluster, make_h100):
    make_h100(3)
    q = queue(api, cluster, "team-a", gpus=8, namespaces=["team-a"]).data
    assert claim(api, cluster, "a1", 8, namespace="team-a").data["status"] == "allocated"
    response = claim(api, cluster, "a2", 1, namespace="team-a")  # falls to the namespace's queue
    assert (response.data["status"], response.data["queue"]) == ("pending", q["id"])
    assert response.data["pending_reason"].startswith("Waiting for its queue's quota: its queue has 0")
    assert claim(api, cluster, "outside", 8).data["status"] == "allocated"  # no queue: as before
    data = api.get(f"/api/v1/queues/{q['id']}/").data
    assert h100(data)["gpus"] == {"nominal": 8, "used": 8, "borrowed": 0, "lent": 0, "available": 0}
    assert data["standing"]["pending"] == [{"priority": 0, "claims": 1, "gpus": 1}]
    response = api.patch(
        f"/api/v1/queues/{q['id']}/", {"quotas": [{"gpu_model": H100, "gpus": 9}]}, format="json"
    )
    assert response.status_code == 200, response.data
    place_pending(cluster.pk)
    assert status("a2") == "allocated"  # a larger quota admits it


def test_a_queue_borrows_in_its_cohort_up_to_its_limit_and_others_see_it_lent(api, cluster, make_h100):
    make_h100(3)
    a = queue(api, cluster, "a", cohort="lab", borrowing_limit=8).data
    b = queue(api, cluster, "b", cohort="lab").data
    queue(api, cluster, "c", cohort="lab")
    for i in range(3):
        claim(api, cluster, f"a{i}", 8, queue=a["id"])
    assert [status(f"a{i}") for i in range(3)] == ["allocated", "allocated", "pending"]  # 8 + 8 at most
    data = api.get(f"/api/v1/queues/{a['id']}/").data
    assert h100(data)["gpus"]["borrowed"] == 8 and data["standing"]["share"] > 0
    lent = [h100(api.get(f"/api/v1/queues/{q}/").data)["gpus"]["lent"] for q in (b["id"],)]
    assert lent == [4]  # b and c leave 8 each unused: each lends half of what a borrows


def test_a_queue_asking_back_its_nominal_reclaims_borrowed_gpus(api, cluster, make_h100):
    make_h100(3)
    a = queue(api, cluster, "a", cohort="lab").data
    queue(api, cluster, "b", cohort="lab")
    c = queue(api, cluster, "c", cohort="lab").data
    for i in range(3):  # queue a takes the whole cohort's 24 GPUs, 16 of them borrowed
        assert claim(api, cluster, f"a{i}", 8, queue=a["id"], priority=5).data["status"] == "allocated"
    response = claim(api, cluster, "c0", 8, queue=c["id"])  # lower priority, but within its nominal
    assert response.data["status"] == "allocated"
    victims = Claim.objects.filter(status="pending")
    assert [v.name for v in victims] == ["a2"]  # one victim, the newest, and only borrowed GPUs
    assert victims[0].preempted_by.name == "c0"
    assert victims[0].pending_reason.startswith("Preempted by claim default/c0 (priority 0)")
    entry = AuditEntry.objects.filter(object_repr="default/a2", action="update").latest("pk")
    assert entry.changes["preempted_by"] == [None, "default/c0"]
    # Past its nominal, c borrows like anyone and reclaims nothing: a keeps its own 8 + the 8 it has.
    assert claim(api, cluster, "c1", 8, queue=c["id"]).data["status"] == "pending"
    assert Claim.objects.filter(status="allocated", queue_id=a["id"]).count() == 2


def test_reclaim_never_takes_a_non_preemptible_claim(api, cluster, make_h100):
    make_h100(2)
    a = queue(api, cluster, "a", cohort="lab").data
    b = queue(api, cluster, "b", cohort="lab").data
    claim(api, cluster, "a0", 8, queue=a["id"], preemptible=False)
    claim(api, cluster, "a1", 8, queue=a["id"], preemptible=False)  # borrowed, but pinned
    response = claim(api, cluster, "b0", 8, queue=b["id"])
    assert response.data["status"] == "pending"
    assert (status("a0"), status("a1")) == ("allocated", "allocated")


def test_priority_preempts_within_a_queue_only(api, cluster, make_h100):
    make_h100(2)
    a = queue(api, cluster, "a", gpus=8).data
    b = queue(api, cluster, "b", gpus=16).data
    claim(api, cluster, "b0", 8, queue=b["id"], preemptible=False)
    claim(api, cluster, "a0", 8, queue=a["id"])
    assert claim(api, cluster, "b1", 8, queue=b["id"], priority=9).data["status"] == "pending"
    assert status("a0") == "allocated"  # another queue's claim within its nominal is never taken
    assert claim(api, cluster, "a1", 8, queue=a["id"], priority=9).data["status"] == "allocated"
    assert Claim.objects.get(name="a0").preempted_by.name == "a1"  # its own queue's, lower priority


def test_a_group_is_admitted_whole_or_waits_holding_nothing(api, cluster, make_h100):
    make_h100(3)
    q = queue(api, cluster, "a", gpus=16).data
    body = {"cluster": cluster.pk, "name": "llm", "members": 3, "template": {"kind": "whole", "gpus": 8}}
    data = api.post(
        "/api/v1/claim-groups/", {**body, "template": {**body["template"], "queue": q["id"]}}, format="json"
    ).data
    assert (data["status"], data["placed"]) == ("pending", 0)
    assert "its queue has 16" in data["pending_reason"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"quotas": [{"gpu_model": "no-such-gpu", "gpus": 1}]}, "quotas"),
        ({"quotas": [{"gpu_model": H100, "gpus": 2, "lending_limit": 3}]}, "lending_limit"),
        ({"quotas": [{"gpu_model": H100, "gpus": -1}]}, "gpus"),
        ({"quotas": [{"gpu_model": H100, "gpus": 1}, {"gpu_model": H100, "gpus": 2}]}, "quotas"),
        ({"cohort": "Not A Label"}, "cohort"),
        ({"namespaces": ["taken"]}, "namespaces"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(api, cluster, change, field):
    assert queue(api, cluster, "first", namespaces=["taken"]).status_code == 201
    body = {"cluster": cluster.pk, "name": "second", **change}
    response = api.post("/api/v1/queues/", body, format="json")
    assert response.status_code == 400, response.data
    assert response.data["code"] == "invalid" and field in response.data["message"]
    assert not Queue.objects.filter(name="second").exists()


def test_a_duplicate_name_is_a_409(api, cluster):
    assert queue(api, cluster, "a").status_code == 201
    response = queue(api, cluster, "a")
    assert response.status_code == 409 and response.data["details"]["field"] == "name"


def test_another_tenants_queue_is_a_404(api, cluster, make_member, client_for):
    data = queue(api, cluster, "a").data
    stranger = client_for(make_member("globex", "owner"))
    assert stranger.get(f"/api/v1/queues/{data['id']}/").status_code == 404
    assert stranger.delete(f"/api/v1/queues/{data['id']}/").status_code == 404
    assert stranger.get("/api/v1/queues/").data["results"] == []
    assert queue(stranger, cluster, "theirs").status_code == 400  # not their cluster
    response = claim(stranger, cluster, "x", 1, queue=data["id"])
    assert response.status_code == 400
    assert api.delete(f"/api/v1/queues/{data['id']}/").status_code == 204


def test_freed_gpus_go_to_the_queue_that_would_borrow_least(api, cluster, make_h100):
    make_h100(3)
    a = queue(api, cluster, "a", cohort="lab").data
    b = queue(api, cluster, "b", cohort="lab").data
    queue(api, cluster, "c", cohort="lab")
    for i in range(3):
        claim(api, cluster, f"a{i}", 4, queue=a["id"])  # 12: 4 borrowed
    for i in range(2):
        claim(api, cluster, f"b{i}", 4, queue=b["id"])  # 8: its nominal
    claim(api, cluster, "blocker", 4, preemptible=False)  # no queue: the fleet is full
    assert claim(api, cluster, "a-next", 4, queue=a["id"]).data["status"] == "pending"
    assert claim(api, cluster, "b-next", 4, queue=b["id"]).data["status"] == "pending"
    release_claim(Claim.objects.get(name="blocker"))
    place_pending(cluster.pk)
    # a's claim is older, but with it a would borrow 8 of 24, b only 4: b's goes first.
    assert (status("b-next"), status("a-next")) == ("allocated", "pending")


def test_reclaim_where_the_fleet_has_room_but_the_cohort_has_none(api, cluster, make_h100):
    make_h100(4)  # 32 GPUs, the cohort's quota 24
    a = queue(api, cluster, "a", cohort="lab").data
    queue(api, cluster, "b", cohort="lab")
    c = queue(api, cluster, "c", cohort="lab").data
    for i in range(3):
        claim(api, cluster, f"a{i}", 8, queue=a["id"])
    assert claim(api, cluster, "a3", 8, queue=a["id"]).data["status"] == "pending"  # quota, not room
    assert claim(api, cluster, "c0", 8, queue=c["id"]).data["status"] == "allocated"
    assert sorted(v.name for v in Claim.objects.filter(preempted_by__name="c0")) == ["a2"]  # one is enough


def test_a_group_within_its_nominal_reclaims_as_a_unit(api, cluster, make_h100):
    make_h100(3)
    a = queue(api, cluster, "a", cohort="lab").data
    queue(api, cluster, "b", cohort="lab")
    c = queue(api, cluster, "c", cohort="lab").data
    for i in range(3):
        claim(api, cluster, f"a{i}", 8, queue=a["id"], priority=5)
    body = {
        "cluster": cluster.pk,
        "name": "llm",
        "members": 2,
        "template": {"kind": "whole", "gpus": 4, "queue": c["id"]},
    }
    created = api.post("/api/v1/claim-groups/", body, format="json").data
    place_pending(cluster.pk)  # a group preempts in a placement pass, as it always has
    data = api.get(f"/api/v1/claim-groups/{created['id']}/").data
    assert (data["status"], data["placed"]) == ("placed", 2)
    assert [v.name for v in Claim.objects.filter(status="pending")] == ["a2"]  # one 8-GPU claim: 4 + 4
