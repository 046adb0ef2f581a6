"""A node's GPUs and their shares are written out by hand (nodepools/api/serializers.py) for speed: the
documents must be what the declared fields (the schema) say, value for value, read from the models."""

import json

import pytest

from claims.allocator import create_claim
from nodepools.api.serializers import GpuSerializer, GpuSnapshotShareSerializer
from nodepools.models import Gpu, Node
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext
from tests.nodepools.expected_documents import expected_gpu

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes(owner, make_cluster, make_pool):
    """A fractional and a MIG node with fractions (a ceiling over its guarantee among them) and slices."""
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "prod")
    frac = make_pool(
        cluster, name="frac", gpu_model="l4", nodes=1, gpus_per_node=4, sharing_mode="fractional"
    )
    mig = make_pool(
        cluster, name="mig", gpu_model="h100-sxm5-80gb", nodes=1, gpus_per_node=8, sharing_mode="mig"
    )
    for pool in (frac, mig):
        reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    for i, (mib, ceiling, guaranteed) in enumerate([(4096, 30, None), (2048, 60, 30), (1024, 5, None)]):
        create_claim(
            context=context,
            cluster=cluster,
            name=f"f{i}",
            kind="fraction",
            gpu_memory_mib=mib,
            compute_percent=ceiling,
            guaranteed_percent=guaranteed,
            pool=frac,
        )
    for i, profile in enumerate(["1g.10gb", "2g.20gb", "1g.10gb"]):
        create_claim(
            context=context, cluster=cluster, name=f"m{i}", kind="mig", mig_profile=profile, pool=mig
        )
    return list(Node.objects.order_by("pk"))


def test_gpus_and_shares_are_the_models_in_the_declared_fields(nodes, owner, client_for):
    api = client_for(owner, token=True)
    listed = json.loads(api.get("/api/v1/nodes/").content)["results"]
    assert [n["id"] for n in listed] == [n.pk for n in Node.objects.all()]  # the list keeps its order
    for node in nodes:
        detail = json.loads(api.get(f"/api/v1/nodes/{node.pk}/").content)
        assert detail == next(n for n in listed if n["id"] == node.pk)
        expected = [expected_gpu(gpu) for gpu in Gpu.objects.filter(node=node).order_by("index")]
        assert detail["gpus"] == expected
        for gpu in detail["gpus"]:
            assert list(gpu) == list(GpuSerializer().fields)
            for share in gpu["shares"]:
                assert list(share) == list(GpuSnapshotShareSerializer().fields)
    shares = [s for node in listed for g in node["gpus"] for s in g["shares"]]
    assert len(shares) == 6 and {s["guaranteed_percent"] for s in shares if s["name"] == "f1"} == {30.0}
