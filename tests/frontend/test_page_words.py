"""The rest of issue 37's item 8, each as the page (or the file) shows it: UI claims recorded as made in
the UI, released claims reachable, usage's cost column with where prices are set, the CSV's rounded
figures and its name's last day, who paused a run, "can never fit" with figures, and no "scale the pool
up" at a pool's maximum."""

import csv
import datetime
import io
import re

import pytest
from django.utils import timezone

from catalog.models import DriverRelease
from claims.allocator import create_claim, release_claim
from claims.models import Claim, UsageInterval
from nodepools.services import reconcile
from nvke.errors import DomainError
from nvke.tenancy.context import TenantContext
from upgrades import services as upgrade_services

from .helpers import text

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(tenant, make_cluster, make_pool):
    pool = make_pool(make_cluster(tenant, "prod"), name="mps", sharing_mode="mps", nodes=1)
    reconcile(pool.pk)
    return pool


def owner_context(tenant) -> TenantContext:
    return TenantContext(tenant, "owner")


def test_a_claim_made_in_the_ui_says_so(ui, pool):
    form = {"namespace": "default", "name": "from-ui", "kind": "fraction", "compute_percent": 20}
    form |= {"gpus": 1, "cpu_milli": 0, "host_memory_mib": 0, "priority": 0, "min_isolation": "none"}
    response = ui.post(f"/clusters/{pool.cluster_id}/claims/new/", form)
    assert response.status_code == 302, re.findall(r"errorlist[^>]*>(.*?)</ul>", text(response), re.S)
    assert Claim.objects.get(name="from-ui").source == "ui"


def test_the_claim_form_takes_an_isolation_ask(ui, pool):
    form = {"namespace": "default", "name": "held", "kind": "fraction", "compute_percent": 20}
    form |= {"gpus": 1, "cpu_milli": 0, "host_memory_mib": 0, "priority": 0, "min_isolation": "memory-capped"}
    assert ui.post(f"/clusters/{pool.cluster_id}/claims/new/", form).status_code == 302
    claim = Claim.objects.get(name="held")
    assert claim.min_isolation == "memory-capped" and claim.allocation.isolation == "memory-capped"
    assert "Memory held (MPS or better)" in text(ui.get(f"/claims/{claim.pk}/"))
    page = text(
        ui.post(f"/clusters/{pool.cluster_id}/claims/new/", {**form, "name": "x", "min_isolation": "hard"})
    )
    assert "cannot ask for hard" in page and not Claim.objects.filter(name="x").exists()


def test_released_claims_stay_reachable_through_a_filter(ui, pool, tenant):
    claim = create_claim(
        context=owner_context(tenant), cluster=pool.cluster, name="gone", kind="fraction", compute_percent=10
    )
    whole = create_claim(
        context=owner_context(tenant), cluster=pool.cluster, name="pair", kind="whole", gpus=2
    )
    release_claim(claim)
    release_claim(whole)
    listing = text(ui.get(f"/clusters/{pool.cluster_id}/claims/"))
    assert 'value="released"' in listing and "data-released-claim" not in listing
    page = text(ui.get(f"/clusters/{pool.cluster_id}/claims/", {"status": "released"}))
    row = re.search(rf'<tr data-released-claim="{claim.pk}">(.*?)</tr>', page, re.S)
    assert row and "gone" in row[1] and "fraction" in row[1]
    row = re.search(rf'<tr data-released-claim="{whole.pk}">(.*?)</tr>', page, re.S)
    assert row and "whole ×2" in row[1]  # as the live list words it, not the stored value


def test_usage_always_has_a_cost_column_and_says_where_prices_are_set(ui, tenant, catalog):
    start = timezone.now() - datetime.timedelta(hours=3)
    UsageInterval.objects.create(
        tenant=tenant, started_at=start, ended_at=start + datetime.timedelta(hours=1), allocation_id=1,
        claim_id=1, claim_name="a", namespace="default", kind="whole", cluster_id=1, cluster_name="prod",
        pool_id=1, pool_name="l4", gpu_model="l4", gpus=1, memory_mib=1024, guaranteed_milli=1000,
        ceiling_milli=1000, gpu_equivalent_milli=1000,
    )  # fmt: skip
    page = text(ui.get("/usage/"))
    assert '<th scope="col" class="num">Cost</th>' in page and "data-usage-cost>–<" in page
    assert "data-usage-prices" in page and "price per GPU-hour" in page


def test_the_csv_rounds_its_figures_and_names_the_last_day_it_covers(api, tenant, catalog):
    since = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    UsageInterval.objects.create(
        tenant=tenant, started_at=since, ended_at=since + datetime.timedelta(seconds=1000), allocation_id=1,
        claim_id=1, claim_name="a", namespace="default", kind="fraction", cluster_id=1, cluster_name="prod",
        pool_id=1, pool_name="l4", gpu_model="l4", gpus=1, memory_mib=1000, guaranteed_milli=333,
        ceiling_milli=333, gpu_equivalent_milli=333,
    )  # fmt: skip
    until = since + datetime.timedelta(days=7)  # midnight: the last day covered is the 7th
    exported = api.get(
        "/api/v1/usage/export/", {"since": since.isoformat(), "until": until.isoformat(), "group_by": "pool"}
    )
    assert 'filename="nvke-usage-pool-20261101-20261107.csv"' in exported["Content-Disposition"]
    (line,) = csv.DictReader(io.StringIO(exported.content.decode()))
    assert all(len(line[k].partition(".")[2]) <= 4 for k in ("memory_gib_seconds", "gpu_hours"))
    assert float(line["gpu_hours"]) == pytest.approx(0.0925, abs=1e-4)


def test_a_run_paused_by_a_member_of_the_tenant_does_not_blame_an_operator(pool, tenant, owner):
    target = DriverRelease.objects.exclude(version=pool.driver_release.version).order_by("-version").first()
    run = upgrade_services.create_run(context=owner_context(tenant), pool=pool, target_release=target)
    run = upgrade_services.control(run, "pause", context=owner_context(tenant), user=owner)
    assert run.message.startswith(f"Paused by {owner.username};") and "operator" not in run.message


def test_a_claim_that_can_never_fit_says_by_how_much(pool, tenant):
    with pytest.raises(DomainError) as refused:
        create_claim(
            context=owner_context(tenant), cluster=pool.cluster, name="huge", kind="fraction",
            gpu_memory_mib=200 * 1024, pool=pool,
        )  # fmt: skip
    assert refused.value.field == "gpu_memory"
    assert "needs 200Gi of GPU memory; the most free on one GPU is" in refused.value.message
    assert "scale the pool up" not in refused.value.message


def test_a_pool_at_its_maximum_is_not_told_to_scale_up(pool, tenant):
    type(pool).objects.filter(pk=pool.pk).update(max_nodes=1)
    ctx = owner_context(tenant)
    for n in range(4):
        create_claim(context=ctx, cluster=pool.cluster, name=f"w{n}", kind="whole", pool=pool)
    waiting = create_claim(context=ctx, cluster=pool.cluster, name="more", kind="whole", pool=pool)
    assert waiting.status == "pending" and "scale the pool up" not in waiting.pending_reason
    assert "max_nodes" in waiting.pending_reason


def test_the_rbac_manifest_reads_as_grants_and_plain_yaml(ui, catalog):
    page = text(ui.get("/clusters/attach/"))
    grants = re.search(r"<table class=\"table\" data-rbac-grants>(.*?)</table>", page, re.S)[1]
    assert "<code>nodes</code>" in grants and "cordon" in grants  # each resource, its verbs and why
    assert page.index("data-rbac-grants") < page.index("data-rbac-manifest")  # the YAML folded below
    download = ui.get("/clusters/attach/rbac.yaml").content.decode()
    assert "&id0" not in download and "*id0" not in download and "&id0" not in page


def test_driver_upgrade_forms_name_no_field_they_lack(ui, ui_for, pool, django_user_model):
    operator = django_user_model.objects.create_user("operator", password="pw-secret-123", is_staff=True)
    for page in (
        text(ui.get(f"/pools/{pool.pk}/upgrade/")),
        text(ui_for(operator).get("/fleet-rollouts/new/")),
    ):
        assert 'name="max_unavailable"' in page and "max_surge" not in page and "at least one" in page
