"""Reads that more than one entry point needs."""

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from .compatibility import Refusal, driver_refusals
from .models import DriverRelease, Gpu, GpuModel, RegionInventory


def region_inventory(region_id: int) -> QuerySet[RegionInventory]:
    """Each GPU model's total and free GPUs in the region (free = not in any pool's nodes)."""
    used = (
        Gpu.objects.filter(
            node__pool__cluster__region_id=region_id, node__pool__gpu_model=OuterRef("gpu_model")
        )
        .values("node__pool__gpu_model")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        RegionInventory.objects.filter(region_id=region_id)
        .select_related("gpu_model")
        .annotate(used=Coalesce(Subquery(used, output_field=IntegerField()), 0))
        .order_by("gpu_model__name")
    )


def driver_compatibility(gpu_model: GpuModel, sharing_mode: str) -> list[tuple[DriverRelease, list[Refusal]]]:
    """Every driver release with why it cannot run this GPU (empty list: it can), newest first."""
    drivers = DriverRelease.objects.prefetch_related("architectures").select_related()
    return [(driver, driver_refusals(driver, gpu_model, sharing_mode)) for driver in drivers]
