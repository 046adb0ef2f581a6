"""The GPU quotas (see nvke/tenancy/quotas.py for how a check takes its limit) and the tenant's usage.

What counts:
- GPUs of a model: each node pool's ceiling, gpus_per_node × max_nodes (pools being deleted excluded),
  so autoscaling can never take a tenant past its quota. The limit is the tenant's own GPU quota for
  the model, else the platform's default for the model (a GPU quota row without a tenant), else
  NVKE_DEFAULT_GPU_QUOTA: no tenant is unlimited unless an operator makes it so;
- claims, pending or placed, by what they ask for: a fraction its gpu_memory and compute_percent; a MIG
  slice its profile's memory and compute slices (of 7); whole GPUs 100 % compute each and the memory
  of the largest GPU model they may land on.
"""

import math
from dataclasses import dataclass

from django.conf import settings
from django.db.models import F, Q, Sum

from catalog.models import GpuModel, MigProfile
from claims.models import Claim
from clusters.quotas import clusters_used
from nodepools.models import NodePool
from nvke.tenancy.models import GpuQuota, Quota, Tenant
from nvke.tenancy.quotas import lock_tenant, quota_of, refuse, require_transaction

MIG_COMPUTE_SLICES = 7  # a full GPU's compute slices under MIG


@dataclass(frozen=True)
class GpuLimit:
    max_gpus: int
    default: bool  # the platform's, not the tenant's own


def gpu_limits(tenant_id: int | None) -> dict[int, GpuLimit | None]:
    """GPU model pk -> the limit on the tenant's pools' GPUs of it (None: unlimited), for every model.
    `tenant_id` None: what a tenant without quotas of its own gets."""
    fallback = settings.NVKE_DEFAULT_GPU_QUOTA
    limits: dict[int, GpuLimit | None] = {
        pk: None if fallback is None else GpuLimit(fallback, True)
        for pk in GpuModel.objects.values_list("pk", flat=True)
    }
    rows = GpuQuota.objects.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))
    for owner, model_id, max_gpus in rows.order_by(F("tenant_id").asc(nulls_first=True)).values_list(
        "tenant_id", "gpu_model_id", "max_gpus"
    ):  # the platform's rows first, so the tenant's own win
        limits[model_id] = GpuLimit(max_gpus, owner is None)
    return limits


def pool_gpus_used(tenant_id: int, exclude_pk: int | None = None) -> dict[int, int]:
    """GPU model pk -> the tenant's pools' ceilings (gpus_per_node × max_nodes), deleting pools aside."""
    pools = NodePool.objects.filter(tenant_id=tenant_id).exclude(status=NodePool.Status.DELETING)
    if exclude_pk:
        pools = pools.exclude(pk=exclude_pk)
    rows = pools.values("gpu_model_id").annotate(gpus=Sum(F("gpus_per_node") * F("max_nodes")))
    return {row["gpu_model_id"]: row["gpus"] for row in rows}


def check_pool(pool) -> None:
    """Call before saving a new node pool or a change of its size (pool.pk set on updates)."""
    require_transaction()
    limit = gpu_limits(pool.tenant_id)[pool.gpu_model_id]
    if limit is None:
        return
    lock_tenant(pool.tenant)
    used = pool_gpus_used(pool.tenant_id, exclude_pk=pool.pk).get(pool.gpu_model_id, 0)
    asked = pool.gpus_per_node * pool.max_nodes
    if used + asked > limit.max_gpus:
        source = " (the platform default)" if limit.default else ""
        refuse(
            f"gpus[{pool.gpu_model.name}]",
            f"{pool.gpu_model.name} GPUs in node pools{source}",
            used,
            asked,
            limit.max_gpus,
        )


@dataclass(frozen=True)
class ClaimAsk:
    memory_mib: int
    compute_percent: int


@dataclass(frozen=True)
class ClaimShape:
    """The fields of a claim that decide what it asks for."""

    kind: str
    gpus: int = 1
    mig_profile: str = ""
    gpu_memory_mib: int | None = None
    compute_percent: int | None = None
    pool_model_id: int | None = None
    allowed_models: tuple[str, ...] = ()

    @classmethod
    def of(cls, claim) -> "ClaimShape":
        return cls(
            claim.kind,
            claim.gpus,
            claim.mig_profile,
            claim.gpu_memory_mib,
            claim.compute_percent,
            claim.pool.gpu_model_id if claim.pool_id else None,
            tuple(sorted(claim.allowed_models or ())),
        )


def claim_ask(shape: ClaimShape) -> ClaimAsk:
    """GPU memory and compute share a claim asks for (upper bounds where the GPU is not known yet)."""
    if shape.kind == "fraction":
        return ClaimAsk(shape.gpu_memory_mib or 0, shape.compute_percent or 0)
    models = GpuModel.objects.all()
    if shape.pool_model_id:
        models = models.filter(pk=shape.pool_model_id)
    elif shape.allowed_models:
        models = models.filter(name__in=shape.allowed_models)
    if shape.kind == "mig":
        profiles = MigProfile.objects.filter(gpu_model__in=models, name=shape.mig_profile)
        largest = max(profiles, key=lambda p: (p.memory_mib, p.compute_slices), default=None)
        if largest is None:
            return ClaimAsk(0, 0)
        return ClaimAsk(largest.memory_mib, math.ceil(100 * largest.compute_slices / MIG_COMPUTE_SLICES))
    memory = max(models.values_list("memory_mib", flat=True), default=0)
    return ClaimAsk(shape.gpus * memory, 100 * shape.gpus)


def claims_use(tenant: Tenant, exclude_pk: int | None = None) -> ClaimAsk:
    """What the tenant's claims ask for together. Claims of one shape are priced once."""
    rows = (
        Claim.objects.filter(tenant=tenant)
        .exclude(pk=exclude_pk)
        .values_list(
            "kind",
            "gpus",
            "mig_profile",
            "gpu_memory_mib",
            "compute_percent",
            "pool__gpu_model_id",
            "allowed_models",
        )
    )
    priced: dict[ClaimShape, ClaimAsk] = {}
    memory = compute = 0
    for kind, gpus, profile, mib, percent, model_id, allowed in rows:
        shape = ClaimShape(kind, gpus, profile, mib, percent, model_id, tuple(sorted(allowed or ())))
        if shape not in priced:
            priced[shape] = claim_ask(shape)
        memory += priced[shape].memory_mib
        compute += priced[shape].compute_percent
    return ClaimAsk(memory, compute)


def check_claim(tenant: Tenant, claim) -> None:
    """Call inside the transaction that saves a new claim, before saving it."""
    quota = quota_of(tenant)
    if quota is None or (quota.max_claim_gpu_memory_mib is None and quota.max_claim_compute_percent is None):
        return
    lock_tenant(tenant)
    used = claims_use(tenant, exclude_pk=claim.pk)
    ask = claim_ask(ClaimShape.of(claim))
    limit = quota.max_claim_gpu_memory_mib
    if limit is not None and used.memory_mib + ask.memory_mib > limit:
        refuse(
            "max_claim_gpu_memory_mib", "claims' GPU memory", used.memory_mib, ask.memory_mib, limit, " MiB"
        )
    limit = quota.max_claim_compute_percent
    if limit is not None and used.compute_percent + ask.compute_percent > limit:
        refuse(
            "max_claim_compute_percent",
            "claims' compute share",
            used.compute_percent,
            ask.compute_percent,
            limit,
            " %",
        )


def usage(tenant: Tenant) -> dict:
    """Every quota of the tenant with its current use; a limit of None is unlimited."""
    quota = Quota.objects.filter(tenant=tenant).first()
    names = dict(GpuModel.objects.values_list("pk", "name"))
    used = pool_gpus_used(tenant.pk)
    gpus = {
        names[pk]: {
            "used": used.get(pk, 0),
            "limit": limit.max_gpus if limit else None,
            "default": limit.default if limit else False,
        }
        for pk, limit in gpu_limits(tenant.pk).items()
        if limit or used.get(pk)
    }
    claims = claims_use(tenant)
    return {
        "clusters": {
            "used": clusters_used(tenant),
            "limit": quota.max_clusters if quota else None,
        },
        "gpus": [{"gpu_model": name, **gpus[name]} for name in sorted(gpus)],
        "claim_gpu_memory_mib": {
            "used": claims.memory_mib,
            "limit": quota.max_claim_gpu_memory_mib if quota else None,
        },
        "claim_compute_percent": {
            "used": claims.compute_percent,
            "limit": quota.max_claim_compute_percent if quota else None,
        },
    }
