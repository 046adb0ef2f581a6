"""Claims through the API: placement, isolation, pending reasons, refusals, release, tenancy."""

import datetime

import pytest
from django.utils import timezone

from claims.allocator import (
    create_claim,
    evict_claims,
    place_pending,
    prune_log,
    rows,
    topology_changed,
)
from claims.allocator.inventory import CACHE, LOG_RETENTION_S, Snapshot
from claims.allocator.locks import allocation_lock
from claims.models import AllocationEvent, Claim, GpuShare
from nodepools.models import Gpu
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(owner, make_cluster):
    return make_cluster(owner.memberships.get().tenant, "prod")


@pytest.fixture
def pools(cluster, make_pool):
    """One node each: 8 H100 (exclusive), 4 L4 (fractional), 8 H100 (MIG, on demand)."""
    made = {
        "whole": make_pool(cluster, name="whole", gpu_model="h100-sxm5-80gb", nodes=1, gpus_per_node=8),
        "frac": make_pool(
            cluster, name="frac", gpu_model="l4", nodes=1, gpus_per_node=4, sharing_mode="fractional"
        ),
        "mig": make_pool(
            cluster, name="mig", gpu_model="h100-sxm5-80gb", nodes=1, gpus_per_node=8, sharing_mode="mig"
        ),
    }
    for pool in made.values():
        reconcile(pool.pk)
    return made


def claim(api, cluster, name, **fields):
    return api.post("/api/v1/claims/", {"cluster": cluster.pk, "name": name, **fields}, format="json")


def test_fraction_is_placed_with_memory_and_compute(api, cluster, pools):
    response = claim(api, cluster, "infer", kind="fraction", gpu_memory="4Gi", compute_percent=50)
    assert response.status_code == 201, response.data
    data = response.data
    assert data["status"] == "allocated" and data["pending_reason"] == ""
    assert data["allocation"]["pool"] == "frac" and data["allocation"]["isolation"] == "none"
    (share,) = data["allocation"]["gpus"]
    assert (share["memory_mib"], share["compute_percent"], share["exclusive"]) == (4096, 50.0, False)
    assert (data["gpu_memory"], data["gpu_memory_display"], data["gpu_util_display"]) == ("4Gi", "4Gi", "50%")


def test_whole_gpus_are_exclusive_and_nvlinked(api, cluster, pools):
    data = claim(api, cluster, "train", kind="whole", gpus=4, nvlink_required=True).data
    assert data["status"] == "allocated", data
    assert data["allocation"]["pool"] == "whole" and data["allocation"]["isolation"] == "exclusive"
    assert len(data["allocation"]["gpus"]) == 4 and all(g["exclusive"] for g in data["allocation"]["gpus"])
    assert data["gpu_util_display"] == "400%"


def test_mig_slice_at_a_valid_start(api, cluster, pools):
    first = claim(api, cluster, "a", kind="mig", mig_profile="3g.40gb").data
    second = claim(api, cluster, "b", kind="mig", mig_profile="3g.40gb").data
    shares = [first["allocation"]["gpus"][0], second["allocation"]["gpus"][0]]
    assert first["allocation"]["isolation"] == "hard"
    assert all(s["mig_profile"] == "3g.40gb" and s["mig_start"] in (0, 4) for s in shares)
    if shares[0]["gpu_uuid"] == shares[1]["gpu_uuid"]:
        assert {s["mig_start"] for s in shares} == {0, 4}  # never overlapping on one GPU


def test_pending_with_reason_then_placed_when_capacity_frees(
    api, cluster, pools, django_capture_on_commit_callbacks
):
    assert claim(api, cluster, "big", kind="whole", gpus=8).data["status"] == "allocated"
    waiting = claim(api, cluster, "next", kind="whole", gpus=8)
    assert waiting.status_code == 201
    assert waiting.data["status"] == "pending"
    assert waiting.data["pending_reason"] == (
        "0/3 nodes: 2 not enough free GPUs, 1 wrong sharing mode. It needs 8 idle GPUs on one node; the most "
        "on a node is 4; another node (scale the pool up) or releasing claims would help."
    )
    big = Claim.objects.get(name="big")
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/v1/claims/{big.pk}/").status_code == 204
    # Released at once; the pending one is placed by the allocator task (eager here).
    assert not GpuShare.objects.filter(allocation__claim__name="big").exists()
    placed = api.get(f"/api/v1/claims/{waiting.data['id']}/").data
    assert placed["status"] == "allocated" and len(placed["allocation"]["gpus"]) == 8


@pytest.mark.parametrize(
    ("fields", "field", "code"),
    [
        ({"kind": "fraction", "gpu_memory": "200Gi"}, "gpu_memory", "never_fits"),  # no catalog GPU has it
        ({"kind": "mig", "mig_profile": "9g.1tb"}, "mig_profile", "never_fits"),
        ({"kind": "fraction", "compute_percent": 10, "cpu_milli": 10**7}, "cpu_milli", "never_fits"),
        ({"kind": "whole", "gpus": 9}, "gpus", "invalid"),
        ({"kind": "fraction"}, "gpu_memory", "invalid"),
        ({"kind": "fraction", "gpu_memory": "lots"}, "gpu_memory", "invalid"),
        ({"kind": "fraction", "compute_percent": 150}, "compute_percent", "invalid"),
        ({"kind": "whole", "gpus": 1, "gpu_memory": "1Gi"}, "kind", "invalid"),
        ({"kind": "mig"}, "mig_profile", "invalid"),
        ({"kind": "fraction", "compute_percent": 10, "gpus": 2}, "gpus", "invalid"),
        ({"kind": "whole", "allowed_models": ["rtx-9090"]}, "allowed_models", "invalid"),
        ({"kind": "teleport"}, "kind", "invalid"),
    ],
)
def test_bad_claims_are_400_naming_the_field(api, cluster, pools, fields, field, code):
    response = claim(api, cluster, "bad", **fields)
    assert response.status_code == 400, response.data
    assert response.data["code"] == code
    named = response.data["details"].get("field") or next(iter(response.data["details"]["fields"]))
    assert named == field
    assert not Claim.objects.exists()


def test_allowed_models_narrow_the_reason(api, cluster, pools):
    data = claim(api, cluster, "picky", kind="fraction", compute_percent=20, allowed_models=["a10"]).data
    assert data["status"] == "pending"
    assert data["pending_reason"] == "0/3 nodes: 3 GPU model not allowed"


def test_claim_bigger_than_its_pool_is_400(api, cluster, pools):
    response = claim(api, cluster, "huge", kind="fraction", gpu_memory="30Gi", pool=pools["frac"].pk)
    assert response.status_code == 400 and response.data["code"] == "never_fits"
    assert response.data["message"] == (
        "This claim can never fit: 0/1 nodes: 1 insufficient GPU memory. It needs 30Gi of GPU memory; the "
        "most free on one GPU is 22.5Gi."
    )
    elsewhere = claim(api, cluster, "huge", kind="fraction", gpu_memory="30Gi")  # any pool: waits
    assert elsewhere.status_code == 201 and elsewhere.data["status"] == "pending"


def test_duplicate_name_is_409(api, cluster, pools):
    assert claim(api, cluster, "dup", kind="fraction", compute_percent=10).status_code == 201
    response = claim(api, cluster, "dup", kind="fraction", compute_percent=10)
    assert response.status_code == 409 and response.data["details"] == {"field": "name"}
    assert (
        claim(api, cluster, "dup", kind="fraction", compute_percent=10, namespace="other").status_code == 201
    )


def test_a_client_that_prefers_not_to_wait_gets_202_and_the_queue_places_the_claim(
    api, cluster, pools, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as queued:
        response = api.post(
            "/api/v1/claims/",
            {"cluster": cluster.pk, "name": "batch-0", "kind": "fraction", "compute_percent": 20},
            format="json",
            HTTP_PREFER="respond-async, wait=10",
        )
    assert response.status_code == 202, response.data
    assert response["Preference-Applied"] == "respond-async"
    assert (response.data["status"], response.data["pending_reason"]) == ("pending", "")  # as queued
    assert queued  # a pass of the allocator queue, asked for once the claim committed
    assert Claim.objects.get(pk=response.data["id"]).status == "allocated"  # it ran (eagerly here)


@pytest.mark.parametrize("prefer", ["", "return=minimal", "respond-asynchronously"])
def test_a_client_that_does_not_prefer_async_waits_for_the_placement(api, cluster, pools, prefer):
    response = api.post(
        "/api/v1/claims/",
        {"cluster": cluster.pk, "name": "now", "kind": "fraction", "compute_percent": 20},
        format="json",
        HTTP_PREFER=prefer,
    )
    assert response.status_code == 201 and response.data["status"] == "allocated"
    assert "Preference-Applied" not in response


def test_a_queued_claim_is_refused_as_any_other_and_nothing_is_written(api, cluster, pools):
    def queue(**fields):
        body = {"cluster": cluster.pk, "name": "q", "kind": "whole", **fields}
        return api.post("/api/v1/claims/", body, format="json", HTTP_PREFER="respond-async")

    response = queue(gpus=99)
    assert response.status_code == 400 and "gpus" in response.data["details"]["fields"]
    assert not Claim.objects.exists()
    assert queue(gpus=1).status_code == 202
    response = queue(gpus=1)
    assert response.status_code == 409 and response.data["details"] == {"field": "name"}
    assert Claim.objects.count() == 1


def test_another_tenants_claims_are_invisible(api, make_member, make_cluster, client_for, catalog):
    other = make_member("globex", "owner")
    foreign_cluster = make_cluster(other.memberships.get().tenant, "theirs")
    theirs = claim(client_for(other), foreign_cluster, "secret", kind="fraction", compute_percent=10).data
    assert api.get(f"/api/v1/claims/{theirs['id']}/").status_code == 404
    assert api.delete(f"/api/v1/claims/{theirs['id']}/").status_code == 404
    assert api.get("/api/v1/claims/").data["count"] == 0
    response = claim(api, foreign_cluster, "sneaky", kind="fraction", compute_percent=10)
    assert response.status_code == 400 and response.data["message"].startswith("cluster:")
    assert Claim.objects.filter(name="secret").exists()


def test_viewer_cannot_claim(make_member, client_for, cluster, pools):
    viewer = make_member("acme", "viewer")
    assert claim(client_for(viewer), cluster, "x", kind="fraction", compute_percent=10).status_code == 403


def test_scale_down_returns_claims_to_pending(api, cluster, pools, django_capture_on_commit_callbacks):
    placed = claim(api, cluster, "f", kind="fraction", compute_percent=10).data
    assert placed["status"] == "allocated"
    pool = pools["frac"]
    pool.node_count = 0
    pool.save()
    with django_capture_on_commit_callbacks(execute=True):
        reconcile(pool.pk)
    again = api.get(f"/api/v1/claims/{placed['id']}/").data
    assert again["status"] == "pending" and again["allocation"] is None
    assert "0/2 nodes" in again["pending_reason"]


def test_defrag_plan_and_apply(api, cluster, pools):
    # Four 25% fractions spread over the four L4s by "spread", then defragment onto fewer GPUs.
    pools["frac"].placement_policy = "spread"
    pools["frac"].save()
    for i in range(4):
        assert claim(api, cluster, f"s{i}", kind="fraction", compute_percent=25).data["status"] == "allocated"
    used = set(GpuShare.objects.filter(gpu__node__pool=pools["frac"]).values_list("gpu_id", flat=True))
    assert len(used) == 4
    plan = api.get(f"/api/v1/clusters/{cluster.pk}/defrag-plan/", {"max_moves": 3}).data
    assert plan["gpus_freed"] == 3 and len(plan["moves"]) == 3
    assert GpuShare.objects.filter(gpu__node__pool=pools["frac"]).values("gpu_id").distinct().count() == 4
    applied = api.post(f"/api/v1/clusters/{cluster.pk}/defrag/", {"max_moves": 3}).data
    assert applied["gpus_freed"] == 3
    assert GpuShare.objects.filter(gpu__node__pool=pools["frac"]).values("gpu_id").distinct().count() == 1


def test_member_may_plan_but_not_apply_defrag(make_member, client_for, cluster, pools):
    member = client_for(make_member("acme", "member"))
    assert member.get(f"/api/v1/clusters/{cluster.pk}/defrag-plan/").status_code == 200
    assert member.post(f"/api/v1/clusters/{cluster.pk}/defrag/", {}).status_code == 403


def test_violation_checker_sees_an_overcommit(api, cluster, pools):
    """The race test trusts allocation_violations: show it catches a hand-made over-commit."""
    from claims.selectors import allocation_violations

    assert claim(api, cluster, "a", kind="fraction", gpu_memory="20Gi").data["status"] == "allocated"
    assert allocation_violations(cluster.pk) == []
    share = GpuShare.objects.get(allocation__claim__name="a")
    extra = GpuShare.objects.create(
        allocation=share.allocation, gpu=share.gpu, memory_mib=8192, compute_milli=0, guaranteed_milli=0
    )
    (problem,) = allocation_violations(cluster.pk)
    assert "memory 28672/23034 MiB" in problem
    GpuShare.objects.filter(pk=extra.pk).update(memory_mib=0, compute_milli=1000, guaranteed_milli=1000)
    assert allocation_violations(cluster.pk) == []  # all of the GPU's compute, and no more
    GpuShare.objects.filter(pk=extra.pk).update(guaranteed_milli=1001)
    problems = allocation_violations(cluster.pk)
    assert any("guaranteed compute 100.1%" in p for p in problems)
    assert any("guaranteed more than its ceiling" in p for p in problems)


def test_node_detail_shows_each_gpus_allocation_snapshot(api, cluster, pools):
    a = claim(api, cluster, "a", kind="fraction", gpu_memory="4Gi", compute_percent=30, pool=pools["frac"].pk)
    b = claim(api, cluster, "b", kind="mig", mig_profile="2g.20gb").data
    node_id = a.data["allocation"]["node"]
    gpus = {g["index"]: g for g in api.get(f"/api/v1/nodes/{node_id}/").data["gpus"]}
    held = gpus[a.data["allocation"]["gpus"][0]["gpu_index"]]
    assert (held["memory_allocated_mib"], held["compute_allocated_percent"]) == (4096, 30.0)
    assert [(s["name"], s["memory_mib"], s["compute_percent"]) for s in held["shares"]] == [("a", 4096, 30.0)]
    mig_gpus = api.get(f"/api/v1/nodes/{b['allocation']['node']}/").data["gpus"]
    (mig,) = [s for g in mig_gpus for s in g["shares"]]
    assert (mig["name"], mig["mig_profile"], mig["mig_size"]) == ("b", "2g.20gb", 2) and mig["mig_start"] in (
        0,
        2,
        4,
    )


def test_two_processes_snapshots_stay_in_step(api, cluster, pools):
    """Each process keeps its own inventory; the allocation log brings the other's changes in."""
    with allocation_lock(cluster.pk):
        other = Snapshot(cluster.pk)  # another worker's copy, loaded before anything is placed
    placed = claim(api, cluster, "a", kind="whole", gpus=8, pool=pools["whole"].pk).data
    node = placed["allocation"]["node"]
    with allocation_lock(cluster.pk):
        assert other.catch_up()
        assert not any(g.idle() for g in other.inventory.nodes[node].gpus)
    assert api.delete(f"/api/v1/claims/{placed['id']}/").status_code == 204
    with allocation_lock(cluster.pk):
        assert other.catch_up()
        assert all(g.idle() for g in other.inventory.nodes[node].gpus)
        assert CACHE.snapshot(cluster.pk).inventory.placements == {}


def test_topology_change_forces_a_reload(api, cluster, pools):
    with allocation_lock(cluster.pk):
        other = Snapshot(cluster.pk)
    topology_changed(cluster.pk)
    with allocation_lock(cluster.pk):
        assert other.catch_up() is False


def test_prune_keeps_recent_entries(api, cluster, pools):
    claim(api, cluster, "a", kind="fraction", compute_percent=10)
    recent = AllocationEvent.objects.filter(cluster=cluster).count()
    assert recent >= 1 and prune_log() == 0
    old = timezone.now() - datetime.timedelta(seconds=LOG_RETENTION_S + 1)
    AllocationEvent.objects.filter(cluster=cluster).update(created_at=old)
    assert prune_log() == recent


def test_pending_claim_is_placed_when_its_pool_scales_up(
    api, cluster, pools, django_capture_on_commit_callbacks
):
    assert (
        claim(api, cluster, "all", kind="whole", gpus=8, pool=pools["whole"].pk).data["status"] == "allocated"
    )
    waiting = claim(api, cluster, "more", kind="whole", gpus=8, pool=pools["whole"].pk).data
    assert waiting["status"] == "pending"
    with django_capture_on_commit_callbacks(execute=True):
        assert api.patch(f"/api/v1/node-pools/{pools['whole'].pk}/", {"node_count": 2}).status_code == 200
    placed = api.get(f"/api/v1/claims/{waiting['id']}/").data
    assert placed["status"] == "allocated"
    assert placed["allocation"]["node"] != Claim.objects.get(name="all").allocation.node_id


def test_a_rolled_back_placement_leaves_no_phantom_in_memory(api, cluster, pools, monkeypatch):
    """The process's inventory is dropped when the locked transaction fails after placing."""

    def fail(*args, **kwargs):
        raise RuntimeError("broadcast failed")

    monkeypatch.setattr(rows, "publish_claim", fail)  # the pass's last step, after its rows
    with pytest.raises(RuntimeError):
        claim(api, cluster, "doomed", kind="whole", gpus=8, pool=pools["whole"].pk)
    monkeypatch.undo()
    assert not GpuShare.objects.exists()
    # The 8 GPUs the failed placement took in memory are free again for the next claim.
    placed = claim(api, cluster, "next", kind="whole", gpus=8, pool=pools["whole"].pk).data
    assert placed["status"] == "allocated", placed


def test_queued_claims_are_placed_in_one_batch(
    owner, cluster, pools, django_capture_on_commit_callbacks, django_assert_max_num_queries
):
    context = TenantContext(owner.memberships.get().tenant, "owner")
    queued = [
        create_claim(
            context=context, cluster=cluster, name=f"q{i}", kind="fraction", compute_percent=20, place=False
        )
        for i in range(12)
    ]
    assert all(c.status == "pending" and c.pending_reason == "" for c in queued)
    # Twelve claims, one pass: the writes do not grow with the number of claims.
    with django_assert_max_num_queries(20):
        assert place_pending(cluster.pk) == 12
    assert Claim.objects.filter(status="allocated").count() == 12
    assert GpuShare.objects.filter(allocation__claim__in=queued).count() == 12
    with django_capture_on_commit_callbacks(execute=True):
        late = create_claim(
            context=context, cluster=cluster, name="late", kind="fraction", compute_percent=20, place=False
        )
    late.refresh_from_db()
    assert late.status == "allocated"  # the queued task ran (eagerly here) after the commit


def test_evicted_claims_move_to_another_gpu_or_wait(api, cluster, pools):
    moved = claim(api, cluster, "moved", kind="fraction", gpu_memory="20Gi").data
    bystander = claim(api, cluster, "bystander", kind="fraction", gpu_memory="20Gi").data
    (share,) = moved["allocation"]["gpus"]
    failed = Gpu.objects.get(uuid=share["gpu_uuid"])
    Gpu.objects.filter(pk=failed.pk).update(healthy=False)
    topology_changed(cluster.pk)

    assert evict_claims(cluster.pk, [moved["id"]]) == 1
    after = GpuShare.objects.get(allocation__claim_id=moved["id"])
    assert after.gpu_id != failed.pk and after.gpu.healthy
    assert api.get(f"/api/v1/claims/{bystander['id']}/").data["allocation"] == bystander["allocation"]

    Gpu.objects.filter(node=failed.node).update(healthy=False)
    topology_changed(cluster.pk)
    assert evict_claims(cluster.pk, [moved["id"], bystander["id"]]) == 0
    for pk in (moved["id"], bystander["id"]):
        pending = Claim.objects.get(pk=pk)
        assert pending.status == "pending" and "nodes" in pending.pending_reason
        assert not GpuShare.objects.filter(allocation__claim=pending).exists()
