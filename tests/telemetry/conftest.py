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
