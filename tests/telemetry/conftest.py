import time

import pytest
import redis
from django.conf import settings
from rest_framework.test import APIClient

from nodepools.models import Gpu, Node
from nodepools.services import reconcile
from telemetry.models import NodeToken


@pytest.fixture(autouse=True)
def clean_redis():
    """This run's Redis db starts empty, so "nothing stored" can be checked by counting keys."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def tenant(owner):
    return owner.memberships.get().tenant


@pytest.fixture
def cluster(tenant, make_cluster):
    return make_cluster(tenant, "prod")


@pytest.fixture
def frac_pool(cluster, make_pool):
    """Two nodes of two fractional L4 GPUs (24 GiB each)."""
    pool = make_pool(
        cluster, name="frac", gpu_model="l4", nodes=2, gpus_per_node=2, sharing_mode="fractional"
    )
    reconcile(pool.pk)
    return pool


@pytest.fixture
def node(frac_pool):
    return Node.objects.filter(pool=frac_pool).order_by("name").first()


@pytest.fixture
def node_client(node):
    """A client posting as `node` with its node token."""
    _, raw = NodeToken.issue(node)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
    return client


def sample(gpu: Gpu, ts: float | None = None, util: float = 50, claims: dict | None = None, **extra) -> dict:
    metrics = {
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_FB_USED": 1024,
        "DCGM_FI_DEV_GPU_TEMP": 55,
        "DCGM_FI_DEV_POWER_USAGE": 40.5,
        "DCGM_FI_DEV_SM_CLOCK": 1800,
        **extra,
    }
    return {
        "gpu": str(gpu.uuid),
        "ts": time.time() if ts is None else ts,
        "metrics": metrics,
        **({"claims": {str(k): v for k, v in claims.items()}} if claims else {}),
    }


def post(client, samples: list[dict]):
    return client.post("/api/v1/telemetry/ingest/", {"samples": samples}, format="json")


def client_of_node(node: Node) -> APIClient:
    _, raw = NodeToken.issue(node)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
    return client


@pytest.fixture
def add_pool(cluster, make_pool):
    """add_pool(name, nodes, gpus_per_node, sharing_mode="fractional", **policy): an L4 pool, provisioned."""

    def add(name: str, nodes: int = 1, gpus_per_node: int = 1, sharing_mode: str = "fractional", **policy):
        pool = make_pool(
            cluster,
            name=name,
            gpu_model="l4",
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            sharing_mode=sharing_mode,
            **policy,
        )
        reconcile(pool.pk)
        return pool

    return add


@pytest.fixture
def claim_in(cluster, tenant):
    """claim_in(name, compute_percent, pool=None, guaranteed_percent=None): a fractional claim, placed at
    once."""
    from claims.allocator import create_claim
    from nvke.tenancy.context import TenantContext

    def make(name: str, compute_percent: int, pool=None, guaranteed_percent: int | None = None):
        return create_claim(
            context=TenantContext(tenant, "owner"),
            cluster=cluster,
            name=name,
            kind="fraction",
            gpu_memory_mib=2048,
            compute_percent=compute_percent,
            guaranteed_percent=guaranteed_percent,
            pool=pool,
        )

    return make


def gpu_of(claim) -> Gpu:
    from claims.models import GpuShare

    return GpuShare.objects.select_related("gpu__node").get(allocation__claim=claim).gpu
