"""The usage page: GPU-hours by day drawn to scale and a table by the chosen group, the tenant's own."""

import datetime

import pytest
from django.utils import timezone

from catalog.models import GpuModel
from claims.models import UsageInterval

pytestmark = pytest.mark.django_db


def held(tenant, hours_ago: float, hours: float, **fields) -> None:
    start = timezone.now() - datetime.timedelta(hours=hours_ago)
    values = {
        "allocation_id": UsageInterval.objects.count() + 1,
        "claim_id": UsageInterval.objects.count() + 1,
        "claim_name": "infer",
        "namespace": "default",
        "kind": "whole",
        "cluster_id": 1,
        "cluster_name": "prod",
        "pool_id": 1,
        "pool_name": "h100",
        "gpu_model": "h100-sxm5-80gb",
        "gpus": 1,
        "memory_mib": 81920,
        "guaranteed_milli": 1000,
        "ceiling_milli": 1000,
        "gpu_equivalent_milli": 1000,
        **fields,
    }
    UsageInterval.objects.create(
        tenant=tenant, started_at=start, ended_at=start + datetime.timedelta(hours=hours), **values
    )


def test_usage_by_pool_with_a_cost_and_a_csv_link(ui, tenant, catalog, make_member):
    GpuModel.objects.filter(name="h100-sxm5-80gb").update(price_per_gpu_hour="2.5000")
    held(tenant, 30, 2)
    held(tenant, 3, 1, pool_name="l4", gpu_model="l4", claim_name="svc")
    other = make_member("globex", "owner").memberships.get().tenant
    held(other, 3, 5, pool_name="theirs")
    page = ui.get("/usage/").content.decode()
    assert 'data-usage-row="prod/h100"' in page and 'data-usage-row="prod/l4"' in page
    assert "theirs" not in page  # another tenant's usage is invisible
    assert "5.00" in page  # 2 GPU-hours of H100 at 2.50
    assert "/api/v1/usage/export/?since=" in page
    assert page.count("data-usage-day=") == 7


def test_grouped_by_claim_over_thirty_days(ui, tenant, catalog):
    held(tenant, 24 * 20, 4)
    page = ui.get("/usage/", {"days": 30, "group_by": "claim"}).content.decode()
    assert 'data-usage-row="prod/default/infer"' in page and page.count("data-usage-day=") >= 1
    assert '<td class="num" data-gpu-hours>4.00</td>' in page
