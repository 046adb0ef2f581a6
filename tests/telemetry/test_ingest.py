"""Ingestion: a node's batch lands in Redis (latest values, heartbeat); a bad batch stores nothing."""

import time

import pytest
from rest_framework.test import APIClient

from nodepools.models import Gpu, Node
from telemetry import store
from telemetry.models import NodeToken

from .conftest import client_of_node, post, sample

pytestmark = pytest.mark.django_db


def stored(redis_client) -> list[bytes]:
    """Every key but the ingestion counters, which count refusals too."""
    return [key for key in redis_client.keys() if key != b"tm:ingest"]


def test_batch_is_stored_and_served_as_latest(api, node, node_client, clean_redis):
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    now = time.time()
    response = post(
        node_client,
        [sample(gpus[0], now - 2, util=10), sample(gpus[0], now - 1, util=70), sample(gpus[1], now, util=33)],
    )
    assert response.status_code == 202, response.data
    assert response.data == {"accepted": 3}

    listed = {g["id"]: g for g in api.get(f"/api/v1/telemetry/gpus/?pool={node.pool_id}").data["results"]}
    assert listed[gpus[0].pk]["latest"]["util"] == 70  # the newest sample wins
    assert listed[gpus[1].pk]["latest"] == {
        "ts": pytest.approx(now),
        "util": 33,
        "mem": 1024,
        "temp": 55,
        "power": 40.5,
        "sm": 1800,
    }
    other_node = Node.objects.filter(pool=node.pool).exclude(pk=node.pk).get()
    assert all(listed[g.pk]["latest"] is None for g in other_node.gpus.all())
    assert float(clean_redis.hget("tm:heartbeat", node.pk)) == pytest.approx(now, abs=5)


def _bad_batches(node: Node) -> dict[str, tuple[list | dict, str, str]]:
    mine = Gpu.objects.filter(node=node).first()
    foreign = Gpu.objects.exclude(node=node).first()
    good = sample(mine)
    return {
        "unknown gpu": ([good, sample(foreign)], "unknown_gpu", "samples[1].gpu"),
        "bad uuid": ([good, {**good, "gpu": "GPU-nope"}], "unknown_gpu", "samples[1].gpu"),
        "unknown field": (
            [good, sample(mine, DCGM_FI_DEV_NOPE=1)],
            "invalid",
            "samples[1].metrics.DCGM_FI_DEV_NOPE",
        ),
        "text value": (
            [sample(mine, DCGM_FI_DEV_GPU_TEMP="hot")],
            "invalid",
            "samples[0].metrics.DCGM_FI_DEV_GPU_TEMP",
        ),
        "old sample": ([good, sample(mine, ts=time.time() - 7200)], "invalid", "samples[1].ts"),
        "no samples": ([], "invalid", "samples"),
        "claim not on gpu": (
            [sample(mine, claims={999999: 50})],
            "unknown_claim",
            "samples[0].claims.999999",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "unknown gpu",
        "bad uuid",
        "unknown field",
        "text value",
        "old sample",
        "no samples",
        "claim not on gpu",
    ],
)
def test_bad_batch_is_refused_whole(case, node, node_client, clean_redis):
    samples, code, field = _bad_batches(node)[case]
    response = post(node_client, samples)
    assert response.status_code == 400, response.data
    assert response.data["code"] == code
    assert response.data["details"]["field"] == field
    assert field.split(".")[0].split("[")[0] in response.data["message"]
    assert stored(clean_redis) == []  # nothing stored, not even the good samples of the batch
    counted = {k: int(v) for k, v in clean_redis.hgetall("tm:ingest").items()}
    assert counted.get(b"rejected", 0) == len(samples) and counted[b"batches_rejected:invalid"] == 1


def test_wrong_or_missing_node_token_is_401(node, clean_redis):
    gpu = Gpu.objects.filter(node=node).first()
    for header in ("Node nvkenode_wrong", "Bearer something", None):
        client = APIClient()
        if header:
            client.credentials(HTTP_AUTHORIZATION=header)
        response = post(client, [sample(gpu)])
        assert response.status_code == 401
        assert response.data["code"] == "invalid_node_token"
    assert stored(clean_redis) == []
    assert clean_redis.hget("tm:ingest", "batches_rejected:unauthorized") == b"3"


def test_one_nodes_token_cannot_post_for_another_node(node, node_client, clean_redis):
    other = Gpu.objects.exclude(node=node).first()
    assert post(node_client, [sample(other)]).status_code == 400
    assert stored(clean_redis) == []


def test_malformed_json_is_400(node_client, clean_redis):
    response = node_client.post("/api/v1/telemetry/ingest/", "{nope", content_type="application/json")
    assert response.status_code == 400 and set(response.data) == {"code", "message", "details"}
    assert stored(clean_redis) == []


def test_node_tokens_are_issued_once_and_scoped(api, node, make_member, client_for, cluster):
    response = api.post("/api/v1/telemetry/node-tokens/", {"node": node.pk})
    assert response.status_code == 201, response.data
    raw = response.data["token"]
    assert raw.startswith("nvkenode_") and response.data["key_prefix"] == raw[:14]
    assert "token" not in api.get("/api/v1/telemetry/node-tokens/").data["results"][0]
    # A new token replaces the old one.
    again = api.post("/api/v1/telemetry/node-tokens/", {"node": node.pk}).data["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
    assert post(client, [sample(node.gpus.first())]).status_code == 401
    client.credentials(HTTP_AUTHORIZATION=f"Node {again}")
    assert post(client, [sample(node.gpus.first())]).status_code == 202
    assert NodeToken.objects.count() == 1

    viewer = client_for(make_member("acme", "viewer"))
    assert viewer.post("/api/v1/telemetry/node-tokens/", {"node": node.pk}).status_code == 403
    stranger = client_for(make_member("globex", "owner"))
    refused = stranger.post("/api/v1/telemetry/node-tokens/", {"node": node.pk})
    assert refused.status_code == 400 and refused.data["details"]["fields"]["node"]


def test_other_tenants_gpus_are_invisible(node, node_client, make_member, client_for):
    gpu = node.gpus.first()
    assert post(node_client, [sample(gpu)]).status_code == 202
    stranger = client_for(make_member("globex", "owner"))
    assert stranger.get(f"/api/v1/telemetry/gpus/{gpu.pk}/").status_code == 404
    assert stranger.get(f"/api/v1/telemetry/gpus/{gpu.pk}/history/").status_code == 404
    assert stranger.get("/api/v1/telemetry/gpus/").data["count"] == 0


def test_a_claim_placed_after_the_node_was_remembered_is_taken_at_once(
    tenant, cluster, frac_pool, clean_redis
):
    from claims.allocator import create_claim
    from nvke.tenancy.context import TenantContext

    clients = {n.pk: client_of_node(n) for n in Node.objects.filter(pool=frac_pool)}
    for node_id, client in clients.items():  # every node's identity is remembered now
        assert post(client, [sample(Gpu.objects.filter(node_id=node_id).first())]).status_code == 202
    claim = create_claim(
        context=TenantContext(tenant, "owner"),
        cluster=cluster,
        name="new",
        kind="fraction",
        gpu_memory_mib=1024,
    )
    gpu = claim.allocation.shares.get().gpu
    response = post(clients[gpu.node_id], [sample(gpu, claims={claim.pk: 80})])
    assert response.status_code == 202, response.data
    assert store.claim_states([claim.pk])[claim.pk]["usage"] == 80


def test_a_refresh_renews_every_remembered_identity_in_three_queries(
    frac_pool, clean_redis, django_assert_max_num_queries
):
    from telemetry import ingest

    first, second = Node.objects.filter(pool=frac_pool).order_by("name")
    old_raw, second_raw = NodeToken.issue(first)[1], NodeToken.issue(second)[1]
    for raw in (old_raw, second_raw):
        ingest.authenticate(raw)
    NodeToken.issue(first)  # replaces the first node's token
    failed = second.gpus.order_by("index").first()
    Gpu.objects.filter(pk=failed.pk).update(healthy=False)
    assert ingest.cached_identity(old_raw) is not None  # remembered until the refresh
    with django_assert_max_num_queries(3):
        ingest.refresh_identities()
    assert ingest.cached_identity(old_raw) is None
    assert ingest.cached_identity(second_raw).unhealthy == {failed.pk}


def test_writing_no_batches_writes_nothing(clean_redis):
    """A slice of a fleet can be empty (the simulator's and the benchmark's, for a small fleet)."""
    store.write_many([], time.time())
    assert store.client().dbsize() == 0
