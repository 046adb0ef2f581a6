"""A claim's document is filled from plain rows and encoded by msgspec (claims/api/claims.py,
`claim_document`) for speed: the list, the detail and a create's answer must be the document DRF's walk
over the models gave, byte for byte, for claims of every kind, placed or not."""

import json

import pytest
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from claims.allocator import create_claim
from claims.api.claims import ClaimSerializer
from claims.models import Claim
from claims.sizing import sizing_hints
from nodepools.services import reconcile
from nodepools.sharing import held_isolation
from nvke.quantity import human_mib
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


# The reference: the serializers as they were before the claim was encoded from plain rows, walked by
# DRF field by field over the model instances.
class GpuShareSerializer(serializers.Serializer):
    gpu_index = serializers.IntegerField(source="gpu.index")
    gpu_uuid = serializers.UUIDField(source="gpu.uuid")
    memory_mib = serializers.IntegerField()
    compute_percent = serializers.SerializerMethodField()
    guaranteed_percent = serializers.SerializerMethodField()
    exclusive = serializers.BooleanField()
    mig_profile = serializers.CharField()
    mig_start = serializers.IntegerField(allow_null=True)

    def get_compute_percent(self, share) -> float:
        return share.compute_milli / 10

    def get_guaranteed_percent(self, share) -> float:
        return share.guaranteed_milli / 10


class AllocationSerializer(serializers.Serializer):
    node = serializers.IntegerField(source="node_id")
    node_name = serializers.CharField(source="node.name")
    pool = serializers.CharField(source="node.pool.name")
    isolation = serializers.SerializerMethodField()
    isolation_detail = serializers.SerializerMethodField()
    gpus = serializers.SerializerMethodField()

    def _held(self, allocation) -> tuple[str, str]:
        return held_isolation(
            allocation.isolation,
            kind=allocation.claim.kind,
            source=allocation.claim.source,
            sharing_mode=allocation.node.pool.sharing_mode,
            facts=allocation.node.preflight,
        )

    def get_isolation(self, allocation) -> str:
        return self._held(allocation)[0]

    def get_isolation_detail(self, allocation) -> str:
        return self._held(allocation)[1]

    def get_gpus(self, allocation) -> list:
        shares = allocation.shares.order_by("gpu__index", "mig_start")
        return GpuShareSerializer(shares, many=True).data


class ModelWalk(ClaimSerializer):
    """ClaimSerializer's declared fields, walked by DRF over a Claim instance."""

    def to_representation(self, claim: Claim) -> dict:
        return serializers.ModelSerializer.to_representation(self, claim)

    def get_allocation(self, claim: Claim) -> dict | None:
        allocation = placed(claim)
        return None if allocation is None else AllocationSerializer(allocation).data

    def get_workload(self, claim: Claim) -> dict | None:
        return claim.workload or None

    def get_preempted_by(self, claim: Claim) -> str | None:
        return str(claim.preempted_by) if claim.preempted_by else None

    def get_sizing(self, claim: Claim) -> dict | None:
        return sizing_hints(claim, placed(claim))

    def get_gpu_memory_display(self, claim: Claim) -> str:
        allocation = placed(claim)
        return human_mib(allocation.memory_mib) if allocation else "-"

    def get_gpu_util_display(self, claim: Claim) -> str:
        allocation = placed(claim)
        if allocation is None:
            return "-"
        ceiling, guaranteed = allocation.compute_milli // 10, allocation.guaranteed_milli // 10
        return f"{ceiling}%" if guaranteed == ceiling else f"{guaranteed}%/{ceiling}%"


def placed(claim: Claim):
    return getattr(claim, "allocation", None) if claim.status == Claim.Status.ALLOCATED else None


def reference(claim: Claim) -> str:
    return JSONRenderer().render(ModelWalk(Claim.objects.get(pk=claim.pk)).data).decode()


def document(data: dict) -> str:
    return JSONRenderer().render(data).decode()  # keys in order, 10.0 is not 10


@pytest.fixture
def cluster(owner, make_cluster, make_pool):
    """Claims of every kind: whole GPUs, MIG slices, fractions on fractional, MPS and time-slicing
    pools (with and without memory, a ceiling over its guarantee), a pending one, one marked pending
    that still has its allocation row, one with a workload, allowed models and a priority, one preempted
    by another that is not preemptible."""
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "prod")
    pools = {
        mode: make_pool(cluster, name=mode.replace("-", ""), gpu_model=model, nodes=1, sharing_mode=mode)
        for mode, model in [
            ("exclusive", "h100-sxm5-80gb"),
            ("mig", "h100-sxm5-80gb"),
            ("fractional", "l4"),
            ("mps", "a100-sxm4-80gb"),
            ("time-slicing", "l4"),
        ]
    }
    for pool in pools.values():
        reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    for name, pool, fields in [
        ("whole", "exclusive", {"kind": "whole", "gpus": 2, "nvlink_required": True}),
        ("slice", "mig", {"kind": "mig", "mig_profile": "1g.10gb"}),
        ("slice3", "mig", {"kind": "mig", "mig_profile": "3g.40gb", "cpu_milli": 500}),
        ("frac", "fractional", {"kind": "fraction", "gpu_memory_mib": 4096, "compute_percent": 30}),
        (
            "burst",
            "fractional",
            {"kind": "fraction", "gpu_memory_mib": 1536, "compute_percent": 60, "guaranteed_percent": 30},
        ),
        ("mps", "mps", {"kind": "fraction", "gpu_memory_mib": 10240, "compute_percent": 10}),
        ("ts", "time-slicing", {"kind": "fraction", "compute_percent": 30, "host_memory_mib": 2048}),
        ("bumped", "exclusive", {"kind": "whole", "gpus": 2}),
        ("urgent", "exclusive", {"kind": "whole", "gpus": 2, "priority": 9, "preemptible": False}),
        (
            "wait",
            None,
            {"kind": "whole", "gpus": 8, "allowed_models": ["l4"], "priority": 5, "training": True},
        ),
    ]:
        create_claim(
            context=context, cluster=cluster, name=name, pool=pool and pools[pool], namespace="ml", **fields
        )
    Claim.objects.filter(name="frac").update(workload={"state": "waiting", "message": "Not yet."})
    # Tried and waiting (a claim never tried is the allocator's to place).
    Claim.objects.filter(name="slice3").update(status=Claim.Status.PENDING, pending_reason="Its node drains.")
    assert set(Claim.objects.filter(status="allocated").values_list("name", flat=True)) == {
        "whole",
        "slice",
        "frac",
        "burst",
        "mps",
        "ts",
        "urgent",
    }
    assert Claim.objects.get(name="bumped").preempted_by.name == "urgent"
    return cluster


def test_list_and_detail_are_drfs_walk_over_the_models(cluster, owner, client_for):
    api = client_for(owner, token=True)
    listed = json.loads(api.get("/api/v1/claims/").content)["results"]
    claims = list(Claim.objects.order_by("cluster_id", "namespace", "name"))
    assert [c["id"] for c in listed] == [c.pk for c in claims]
    for claim, data in zip(claims, listed, strict=True):
        assert document(data) == reference(claim), claim.name
        detail = json.loads(api.get(f"/api/v1/claims/{claim.pk}/").content)
        assert document(detail) == reference(claim), claim.name
        # The body itself, as it is encoded (not parsed and rendered again).
        assert api.get(f"/api/v1/claims/{claim.pk}/").content.decode() == reference(claim), claim.name
    kinds = {c["name"]: (c["kind"], c["allocation"] is not None, c["sizing"] is not None) for c in listed}
    assert kinds["whole"] == ("whole", True, False) and kinds["slice3"] == ("mig", False, False)
    assert kinds["mps"] == ("fraction", True, True) and kinds["wait"] == ("whole", False, False)


def test_a_created_claims_answer_is_drfs_walk_over_the_model(cluster, owner, client_for):
    api = client_for(owner, token=True)
    pool = cluster.node_pools.get(name="fractional")
    for name, fields in [
        ("new", {"kind": "fraction", "gpu_memory": "1Gi", "compute_percent": 20, "pool": pool.pk}),
        ("never", {"kind": "whole", "gpus": 8, "allowed_models": ["l4"]}),
    ]:
        response = api.post("/api/v1/claims/", {"cluster": cluster.pk, "name": name, **fields}, format="json")
        assert response.status_code == 201, response.data
        assert response.content.decode() == reference(Claim.objects.get(name=name))
