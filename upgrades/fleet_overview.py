"""The fleet as its operator reads it: every tenant with its use and quotas, GPU capacity by region and
model, upgrades and rollouts in flight, and the nodes and GPUs that are failing. Across all tenants, so
only operators' views call it: the console (/fleet/) and the API's `fleet/`. A fixed number of
queries, whatever the fleet's size."""

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet, Sum

from catalog.models import RegionInventory
from claims.models import Claim, GpuShare
from clusters.models import Cluster
from nodepools.models import Gpu, Node
from nvke.tenancy.models import GpuQuota, Quota, Tenant

from .models import FleetRollout, UpgradeRun
from .run_lifecycle import LIVE

IN_FLIGHT = sorted(LIVE)  # running, paused or aborting
FAILING_SHOWN = 50  # the list of failing nodes and GPUs stops here; the counts are whole
ATTACHED = "attached"  # the region column of attached clusters' GPUs: their own machines


@dataclass(frozen=True)
class TenantRow:
    tenant: Tenant
    clusters: int
    gpus: int
    compute_held_milli: int  # guaranteed compute of its allocated claims, thousandths of a GPU
    pending_claims: int
    quotas: list[str]  # "3 clusters", "16 L4 24GB GPUs"; empty: the defaults

    @property
    def compute_held(self) -> str:
        return f"{self.compute_held_milli / 1000:g}"


@dataclass(frozen=True)
class RegionModel:
    region: str
    gpu_model: str
    inventory: int | None  # what the region has of the model; None: not counted (attached clusters)
    in_pools: int  # GPUs on tenants' nodes
    healthy: int
    compute_held_milli: int

    @property
    def compute_held(self) -> str:
        return f"{self.compute_held_milli / 1000:g}"

    @property
    def held_fraction(self) -> float:
        return self.compute_held_milli / ((self.in_pools * 1000) or 1)


def _by(queryset: QuerySet, key: str, **aggregates) -> dict:
    return {row[key]: row for row in queryset.values(key).annotate(**aggregates).order_by()}


def tenants() -> list[TenantRow]:
    clusters = _by(Cluster.objects.exclude(status=Cluster.Status.DELETING), "tenant_id", n=Count("pk"))
    gpus = _by(Gpu.objects.all(), "tenant_id", n=Count("pk"))
    held = _by(
        GpuShare.objects.filter(allocation__claim__status=Claim.Status.ALLOCATED),
        "gpu__tenant_id",
        n=Sum("guaranteed_milli"),
    )
    pending = _by(Claim.objects.filter(status=Claim.Status.PENDING), "tenant_id", n=Count("pk"))
    quotas: dict[int, list[str]] = defaultdict(list)
    for quota in Quota.objects.exclude(max_clusters=None):
        quotas[quota.tenant_id].append(f"{quota.max_clusters} clusters")
    for quota in GpuQuota.objects.exclude(tenant=None).select_related("gpu_model"):
        quotas[quota.tenant_id].append(f"{quota.max_gpus} {quota.gpu_model.display_name} GPUs")
    return [
        TenantRow(
            tenant=tenant,
            clusters=clusters.get(tenant.pk, {}).get("n", 0),
            gpus=gpus.get(tenant.pk, {}).get("n", 0),
            compute_held_milli=held.get(tenant.pk, {}).get("n") or 0,
            pending_claims=pending.get(tenant.pk, {}).get("n", 0),
            quotas=quotas[tenant.pk],
        )
        for tenant in Tenant.objects.order_by("name")
    ]


def capacity_by_region() -> list[RegionModel]:
    """Each region's GPUs of each model: its inventory, those on tenants' nodes, healthy, and the
    compute allocated claims are guaranteed on them."""
    region, model = "node__pool__cluster__region__name", "node__pool__gpu_model__display_name"
    found: dict[tuple[str, str], dict] = {}
    for row in RegionInventory.objects.values("region__name", "gpu_model__display_name", "total_gpus"):
        key = (row["region__name"], row["gpu_model__display_name"])
        found[key] = {"inventory": row["total_gpus"], "gpus": 0, "healthy": 0, "held": 0}
    counted = Gpu.objects.values(region, model).annotate(
        n=Count("pk"), healthy=Count("pk", filter=Q(healthy=True))
    )
    for row in counted.order_by():
        entry = found.setdefault(
            (row[region] or ATTACHED, row[model]), {"inventory": None, "gpus": 0, "healthy": 0, "held": 0}
        )
        entry.update(gpus=row["n"], healthy=row["healthy"])
    held = GpuShare.objects.filter(allocation__claim__status=Claim.Status.ALLOCATED).values(
        f"gpu__{region}", f"gpu__{model}"
    )
    for row in held.annotate(n=Sum("guaranteed_milli")).order_by():
        key = (row[f"gpu__{region}"] or ATTACHED, row[f"gpu__{model}"])
        if key in found:
            found[key]["held"] = row["n"] or 0
    return [
        RegionModel(r, m, e["inventory"], e["gpus"], e["healthy"], e["held"])
        for (r, m), e in sorted(found.items())
    ]


def runs_in_flight() -> QuerySet[UpgradeRun]:
    return (
        UpgradeRun.objects.filter(status__in=IN_FLIGHT)
        .select_related("pool__cluster__tenant", "target_release", "rollout")
        .order_by("pk")
    )


def rollouts_in_flight() -> QuerySet[FleetRollout]:
    return FleetRollout.objects.filter(status__in=IN_FLIGHT).select_related("target_release").order_by("pk")


def failing_nodes() -> QuerySet[Node]:
    return Node.objects.filter(status=Node.Status.NOT_READY).select_related("pool__cluster__tenant")


def failing_gpus() -> QuerySet[Gpu]:
    return Gpu.objects.filter(healthy=False).select_related("node__pool__cluster__tenant")
