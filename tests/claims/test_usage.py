"""Metering: usage intervals follow a claim's allocations exactly (create, resize, move, release), the
report clips and groups them to the second, prices them, and a tenant sees only its own."""

import csv
import datetime
import io
from decimal import Decimal

import pytest

from catalog.models import GpuModel
from claims.allocator import create_claim, evict_claims, release_claim, resize_claim
from claims.models import Allocation, UsageInterval
from claims.usage import report
from nodepools.models import Node
from nodepools.nodes import set_cordons
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db

T0 = datetime.datetime(2026, 12, 1, 22, 0, tzinfo=datetime.UTC)


@pytest.fixture
def cluster(owner, make_cluster):
    return make_cluster(owner.memberships.get().tenant, "prod")


@pytest.fixture
def context(cluster):
    return TenantContext(cluster.tenant, "owner")


def interval(tenant, start, end, **fields) -> UsageInterval:
    values = {
        "allocation_id": UsageInterval.objects.count() + 1,
        "claim_id": 1,
        "claim_name": "infer",
        "namespace": "default",
        "kind": "fraction",
        "cluster_id": 1,
        "cluster_name": "prod",
        "pool_id": 1,
        "pool_name": "a10",
        "gpu_model": "a10",
        "gpus": 1,
        "memory_mib": 8192,
        "guaranteed_milli": 100,
        "ceiling_milli": 700,
        "gpu_equivalent_milli": 333,
        **fields,
    }
    return UsageInterval.objects.create(tenant=tenant, started_at=start, ended_at=end, **values)


def test_the_report_counts_each_second_inside_the_range(cluster):
    tenant = cluster.tenant
    interval(tenant, T0, T0 + datetime.timedelta(hours=4))  # 22:00 → 02:00 the next day
    interval(tenant, T0 + datetime.timedelta(hours=1), None, claim_name="svc", pool_name="t4", gpu_model="t4")
    until = T0 + datetime.timedelta(hours=3)
    (a10, t4) = sorted(report(tenant, T0, until, "pool"), key=lambda u: u.key)
    assert a10.key == "prod/a10" and t4.key == "prod/t4"
    seconds = 3 * 3600  # clipped at until
    assert a10.memory_gib_seconds == 8 * seconds
    assert (a10.guaranteed_percent_seconds, a10.ceiling_percent_seconds) == (10 * seconds, 70 * seconds)
    assert a10.gpu_seconds == pytest.approx(0.333 * seconds)
    assert t4.gpu_seconds == pytest.approx(0.333 * 2 * 3600)  # open: counted up to until
    by_day = report(tenant, T0, until, "day")
    assert [(d.key, d.gpu_seconds / 0.333) for d in by_day] == [
        ("2026-12-01", pytest.approx(2 * 3600 + 1 * 3600)),  # 22–24 h and 23–24 h
        ("2026-12-02", pytest.approx(3600 + 3600)),  # 0–1 h of each
    ]


def test_a_price_in_the_catalog_gives_a_cost(cluster):
    GpuModel.objects.filter(name="a10").update(price_per_gpu_hour=Decimal("1.2000"))
    interval(cluster.tenant, T0, T0 + datetime.timedelta(hours=10), gpu_equivalent_milli=500)
    interval(cluster.tenant, T0, T0 + datetime.timedelta(hours=10), gpu_model="t4", pool_name="t4")
    rows = {u.key: u for u in report(cluster.tenant, T0, T0 + datetime.timedelta(days=1), "gpu_model")}
    assert rows["a10"].cost == pytest.approx(Decimal("6.0"))  # 5 GPU-hours at 1.20
    assert rows["t4"].cost is None  # unpriced


def test_intervals_follow_create_resize_move_and_release(cluster, context, make_pool):
    pool = make_pool(
        cluster,
        name="ts",
        gpu_model="a10",
        nodes=2,
        gpus_per_node=1,
        sharing_mode="time-slicing",
        compute_oversubscription_percent=200,
        default_guaranteed_percent=10,
    )
    reconcile(pool.pk)
    claim = create_claim(
        context=context,
        cluster=cluster,
        name="train",
        kind="fraction",
        gpu_memory_mib=8192,
        compute_percent=70,
    )
    (first,) = UsageInterval.objects.filter(claim_id=claim.pk)
    assert first.ended_at is None and first.allocation_id == claim.allocation.pk
    assert (first.memory_mib, first.guaranteed_milli, first.ceiling_milli) == (8192, 100, 700)
    card = GpuModel.objects.get(name="a10").memory_mib
    assert first.gpu_equivalent_milli == 8192 * 1000 // card  # memory is its larger share
    assert (first.pool_name, first.cluster_name, first.namespace) == ("ts", "prod", "default")

    resize_claim(claim.pk, compute_percent=90)  # in place: the same allocation, a new interval
    second = UsageInterval.objects.get(claim_id=claim.pk, ended_at=None)
    assert second.allocation_id == first.allocation_id and second.ceiling_milli == 900
    first.refresh_from_db()
    assert first.ended_at == second.started_at

    node = Node.objects.get(allocations__claim=claim)
    set_cordons(cluster.pk, {node.pk: True})
    assert evict_claims(cluster.pk, [claim.pk]) == 1  # moved to the other node
    third = UsageInterval.objects.get(claim_id=claim.pk, ended_at=None)
    assert third.allocation_id == Allocation.objects.get(claim=claim).pk != second.allocation_id
    second.refresh_from_db()
    assert second.ended_at <= third.started_at  # one after the other: never counted twice

    release_claim(claim)
    intervals = list(UsageInterval.objects.filter(claim_id=claim.pk).order_by("started_at"))
    assert len(intervals) == 3 and all(i.ended_at is not None for i in intervals)
    total = sum((i.ended_at - i.started_at).total_seconds() for i in intervals)
    (row,) = report(cluster.tenant, intervals[0].started_at, intervals[-1].ended_at, "claim")
    assert row.key == "prod/default/train" and row.memory_gib_seconds == pytest.approx(8 * total)


def test_the_api_reports_only_the_tenants_own_usage_and_exports_csv(api, cluster, make_member, client_for):
    interval(cluster.tenant, T0, T0 + datetime.timedelta(hours=2))
    params = {
        "since": T0.isoformat(),
        "until": (T0 + datetime.timedelta(days=1)).isoformat(),
        "group_by": "claim",
    }
    mine = api.get("/api/v1/usage/", params)
    assert mine.status_code == 200, mine.data
    (row,) = mine.data["results"]
    assert row["key"] == "prod/default/infer" and row["gpu_hours"] == pytest.approx(0.666)
    other = client_for(make_member("globex", "owner"))
    assert other.get("/api/v1/usage/", params).data["results"] == []

    exported = api.get("/api/v1/usage/export/", params)
    assert exported["Content-Type"].startswith("text/csv") and "attachment" in exported["Content-Disposition"]
    (line,) = csv.DictReader(io.StringIO(exported.content.decode()))
    assert line["key"] == "prod/default/infer" and float(line["memory_gib_seconds"]) == 8 * 7200


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group_by": "galaxy"}, "group_by"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "since"),
        ({"since": "2024-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "since"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(api, cluster, params, field):
    response = api.get("/api/v1/usage/", params)
    assert response.status_code == 400 and field in str(response.data)
