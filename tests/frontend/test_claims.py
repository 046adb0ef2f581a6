"""GPU claims through the dashboard: create, list, detail, release, and the pool's GPU snapshot."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from claims.allocator import create_claim
from claims.models import Allocation, Claim, GpuShare
from clusters.models import Cluster
from nodepools.models import Node, NodePool
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

from .helpers import field_errors, live_texts, text

pytestmark = pytest.mark.django_db

FRACTION = {
    "namespace": "default",
    "name": "infer",
    "kind": "fraction",
    "pool": "",
    "gpus": "1",
    "mig_profile": "",
    "gpu_memory": "4Gi",
    "compute_percent": "50",
    "cpu_milli": "0",
    "host_memory_mib": "0",
    "priority": "0",
}


@pytest.fixture
def cluster(tenant, make_cluster) -> Cluster:
    return make_cluster(tenant, "prod")


@pytest.fixture
def frac_pool(cluster, make_pool) -> NodePool:
    """One node with one L4 (23034 MiB), shared fractionally."""
    pool = make_pool(
        cluster, name="frac", gpu_model="l4", nodes=1, gpus_per_node=1, sharing_mode="fractional"
    )
    reconcile(pool.pk)
    return pool


@pytest.fixture
def mig_pool(cluster, make_pool) -> NodePool:
    """One node with one H100 cut into MIG slices on demand."""
    pool = make_pool(
        cluster, name="mig", gpu_model="h100-sxm5-80gb", nodes=1, gpus_per_node=1, sharing_mode="mig"
    )
    reconcile(pool.pk)
    return pool


def create(ui, cluster: Cluster, **fields):
    return ui.post(f"/clusters/{cluster.pk}/claims/new/", {**FRACTION, **fields})


def row(response, claim: Claim) -> list[str]:
    """The cells of a claim's row in the claims table, as text."""
    html = text(response).split(f'data-claim-row="{claim.pk}"')[1].split("</tr>")[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", html, re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", cell).split()) for cell in cells]


def segments(response) -> dict[int, str]:
    """Claim pk -> the inline style of its segment in the pool page's GPU bars."""
    found = re.findall(r'style="([^"]*)" title="[^"]*" data-claim-segment="(\d+)"', text(response))
    return {int(pk): style for style, pk in found}


# --- create and list -------------------------------------------------------------------------------


def test_fraction_claim_lands_and_the_list_shows_memory_util_and_node(ui, cluster, frac_pool):
    response = create(ui, cluster)
    claim = Claim.objects.get(name="infer")
    assert response.status_code == 302 and response.url == f"/claims/{claim.pk}/"
    assert claim.status == "allocated"
    node = Node.objects.get(pool=frac_pool)
    listing = ui.get(f"/clusters/{cluster.pk}/claims/")
    assert listing.status_code == 200
    assert row(listing, claim) == [
        "default",
        "infer",
        "fraction",
        "allocated",
        node.name,
        "4Gi",
        "50%",
        "none",
    ]
    assert live_texts(listing, "data-claim-status", claim.pk) == ["allocated"]
    assert f'data-refresh-on="claims:{cluster.pk}"' in text(listing)


def test_a_claim_that_cannot_fit_now_is_pending_with_its_reason(ui, cluster, frac_pool):
    assert create(ui, cluster, name="big", gpu_memory="20Gi").status_code == 302
    response = create(ui, cluster, name="late", gpu_memory="8Gi")
    late = Claim.objects.get(name="late")
    assert response.status_code == 302 and late.status == "pending"
    # What it asks for against the most on offer: 20Gi of the L4's 22.5Gi are taken.
    reason = (
        "0/1 nodes: 1 insufficient GPU memory. It needs 8Gi of GPU memory; the most free on one GPU is "
        "2.5Gi; another node (scale the pool up) or releasing claims would help."
    )
    assert late.pending_reason == reason
    listing = ui.get(f"/clusters/{cluster.pk}/claims/")
    assert row(listing, late) == [
        "default",
        "late",
        "fraction",
        f"pending {reason}",
        "-",
        "-",
        "-",
        "-",
    ]
    detail = text(ui.get(f"/claims/{late.pk}/"))
    assert '<p class="pending-reason" data-claim-reason="' in detail
    assert f"{reason}</p>" in detail
    assert "Where it landed" not in detail


def test_a_claim_that_never_fits_is_refused_next_to_gpu_memory(ui, cluster, frac_pool):
    response = create(ui, cluster, gpu_memory="500Gi")
    assert response.status_code == 400
    (error,) = field_errors(response, "gpu_memory")
    assert error.startswith("This claim can never fit:") and "insufficient GPU memory" in error
    assert field_errors(response, "kind") == []
    assert not Claim.objects.exists()


def test_a_bad_quantity_is_shown_next_to_gpu_memory(ui, cluster, frac_pool):
    response = create(ui, cluster, gpu_memory="lots")
    assert response.status_code == 400
    assert field_errors(response, "gpu_memory") == ["'lots' is not a memory quantity like 4Gi or 512Mi."]
    assert not Claim.objects.exists()


def test_a_duplicate_name_is_shown_next_to_name(ui, cluster, frac_pool):
    assert create(ui, cluster, gpu_memory="1Gi").status_code == 302
    response = create(ui, cluster, gpu_memory="1Gi")
    assert response.status_code == 400
    assert field_errors(response, "name") == [
        "Namespace default of cluster prod already has a claim named 'infer'."
    ]
    assert Claim.objects.count() == 1


def test_a_failed_cluster_takes_no_claims_and_says_why_above_the_form(ui, tenant, make_cluster):
    cluster = make_cluster(tenant, "broken", status="failed")
    response = create(ui, cluster)
    assert response.status_code == 400
    assert '<ul class="errorlist nonfield"><li>Cluster broken is failed; it takes no claims.</li>' in text(
        response
    )
    assert not Claim.objects.exists()


def test_the_form_offers_the_clusters_pools_and_mig_profiles(ui, cluster, frac_pool, mig_pool):
    form = ui.get(f"/clusters/{cluster.pk}/claims/new/").context["form"]
    assert [pool.name for pool in form.fields["pool"].queryset] == ["frac", "mig"]
    profiles = [value for value, _ in form.fields["mig_profile"].widget.choices]
    assert profiles[0] == "" and "3g.40gb" in profiles and "1g.10gb" in profiles


def test_without_mig_pools_the_mig_profile_is_free_text(ui, cluster, frac_pool):
    page = text(ui.get(f"/clusters/{cluster.pk}/claims/new/"))
    assert '<input type="text" name="mig_profile"' in page


def test_mig_claim_from_the_form_is_hard_isolated_and_detailed(ui, cluster, mig_pool):
    response = create(
        ui, cluster, name="slice", kind="mig", gpu_memory="", compute_percent="", mig_profile="3g.40gb"
    )
    claim = Claim.objects.get(name="slice")
    assert response.status_code == 302 and claim.status == "allocated"
    share = GpuShare.objects.select_related("gpu").get(allocation__claim=claim)
    page = text(ui.get(f"/claims/{claim.pk}/"))
    assert "MIG: its own memory and compute slices" in page
    assert f"<td>GPU {share.gpu.index}</td>" in page
    assert str(share.gpu.uuid).split("-")[0] in page
    assert f"3g.40gb at slice {share.mig_start}" in page
    assert row(ui.get(f"/clusters/{cluster.pk}/claims/"), claim)[2:4] == ["mig 3g.40gb", "allocated"]


def test_claim_detail_explains_where_a_fraction_landed(ui, cluster, frac_pool):
    create(ui, cluster)
    claim = Claim.objects.get(name="infer")
    page = text(ui.get(f"/claims/{claim.pk}/"))
    assert Node.objects.get(pool=frac_pool).name in page
    assert f'href="/pools/{frac_pool.pk}/">frac</a>' in page
    assert "Fractional: memory and compute caps are enforced in software" in page
    assert '<td class="num">4Gi</td>' in page and '<td class="num">50%</td>' in page


def test_the_list_filters_by_namespace_and_status(ui, cluster, frac_pool):
    create(ui, cluster, name="a", gpu_memory="20Gi")
    create(ui, cluster, name="b", namespace="team", gpu_memory="20Gi")  # no room left: pending
    url = f"/clusters/{cluster.pk}/claims/"
    a, b = Claim.objects.get(name="a"), Claim.objects.get(name="b")
    assert (a.status, b.status) == ("allocated", "pending")
    by_namespace = text(ui.get(url, {"namespace": "team"}))
    assert f'data-claim-row="{b.pk}"' in by_namespace and f'data-claim-row="{a.pk}"' not in by_namespace
    by_status = text(ui.get(url, {"status": "allocated"}))
    assert f'data-claim-row="{a.pk}"' in by_status and f'data-claim-row="{b.pk}"' not in by_status
    assert "No claims match these filters" in text(ui.get(url, {"namespace": "team", "status": "allocated"}))


def test_empty_list_says_what_to_do_next(ui, cluster):
    page = text(ui.get(f"/clusters/{cluster.pk}/claims/"))
    assert "No GPU claims in this cluster yet" in page
    assert f'href="/clusters/{cluster.pk}/claims/new/">create a claim</a>' in page


def test_cluster_detail_links_the_claims_with_counts(ui, cluster, frac_pool):
    create(ui, cluster, name="a", gpu_memory="20Gi")
    create(ui, cluster, name="b", gpu_memory="20Gi")
    page = text(ui.get(f"/clusters/{cluster.pk}/"))
    assert f'href="/clusters/{cluster.pk}/claims/"' in page
    assert '<span class="stat-value" data-claim-count="total">2</span>' in page
    assert '<span class="stat-value" data-claim-count="allocated">1</span>' in page
    assert '<span class="stat-value" data-claim-count="pending">1</span>' in page


# --- the pool's GPU snapshot ------------------------------------------------------------------------


def test_pool_snapshot_draws_each_claim_to_scale(ui, cluster, frac_pool):
    create(ui, cluster, name="a", gpu_memory="4Gi", compute_percent="50")
    create(ui, cluster, name="b", gpu_memory="8Gi", compute_percent="25")
    a, b = Claim.objects.get(name="a"), Claim.objects.get(name="b")
    response = ui.get(f"/pools/{frac_pool.pk}/")
    # 4096 and 8192 MiB of the L4's 23034, side by side
    assert segments(response) == {a.pk: "left: 0%; width: 17.78%", b.pk: "left: 17.78%; width: 35.56%"}
    page = text(response)
    assert '<span class="gpu-figures">12Gi / 22.5Gi (53%)</span>' in page
    assert 'title="default/a: 4Gi, 50% compute"' in page
    assert 'aria-label="GPU 0: 12Gi / 22.5Gi (53%) held. default/a: 4Gi, 50% compute; ' in page
    assert f'href="/claims/{a.pk}/">default/a</a>' in page
    assert f'data-refresh-on="pool:{frac_pool.pk}"' in page  # its claims' events name the pool


def test_an_idle_gpu_shows_an_empty_bar(ui, cluster, frac_pool):
    page = text(ui.get(f"/pools/{frac_pool.pk}/"))
    assert '<span class="gpu-figures">0Gi / 22.5Gi (0%)</span>' in page
    assert "data-claim-segment" not in page


def test_pool_snapshot_draws_mig_slices_at_their_start(ui, cluster, mig_pool):
    create(ui, cluster, name="s1", kind="mig", gpu_memory="", compute_percent="", mig_profile="3g.40gb")
    create(ui, cluster, name="s2", kind="mig", gpu_memory="", compute_percent="", mig_profile="3g.40gb")
    shares = {s.allocation.claim_id: s for s in GpuShare.objects.select_related("allocation")}
    assert sorted(s.mig_start for s in shares.values()) == [0, 4]
    drawn = segments(ui.get(f"/pools/{mig_pool.pk}/"))
    assert drawn == {pk: f"left: {s.mig_start * 12.5:g}%; width: 50%" for pk, s in shares.items()}
    page = text(ui.get(f"/pools/{mig_pool.pk}/"))
    assert 'class="gpu-bar gpu-bar-mig"' in page
    assert "3g.40gb at slice 4" in page


def test_pool_snapshot_draws_a_small_mig_slice_off_the_left_edge(ui, cluster, mig_pool):
    create(ui, cluster, name="big", kind="mig", gpu_memory="", compute_percent="", mig_profile="4g.40gb")
    create(ui, cluster, name="small", kind="mig", gpu_memory="", compute_percent="", mig_profile="1g.10gb")
    small = GpuShare.objects.get(allocation__claim__name="small")
    assert small.mig_start >= 4  # 4g.40gb only starts at 0
    drawn = segments(ui.get(f"/pools/{mig_pool.pk}/"))
    assert drawn[small.allocation.claim_id] == f"left: {small.mig_start * 12.5:g}%; width: 12.5%"


def test_pool_page_queries_do_not_grow_with_claims(ui, cluster, frac_pool):
    create(ui, cluster, name="one", gpu_memory="1Gi", compute_percent="10")
    with CaptureQueriesContext(connection) as one:
        assert ui.get(f"/pools/{frac_pool.pk}/").status_code == 200
    for name in ["two", "three", "four"]:
        create(ui, cluster, name=name, gpu_memory="1Gi", compute_percent="10")
    assert Claim.objects.filter(status="allocated").count() == 4
    with CaptureQueriesContext(connection) as four:
        page = text(ui.get(f"/pools/{frac_pool.pk}/"))
    assert page.count("data-claim-segment=") == 4
    assert len(four.captured_queries) == len(one.captured_queries)


# --- release ---------------------------------------------------------------------------------------


def test_release_asks_first_then_frees_the_allocation(
    ui, cluster, frac_pool, django_capture_on_commit_callbacks
):
    create(ui, cluster, name="big", gpu_memory="20Gi")
    create(ui, cluster, name="late", gpu_memory="8Gi")
    big, late = Claim.objects.get(name="big"), Claim.objects.get(name="late")
    assert late.status == "pending"
    assert f'href="/claims/{big.pk}/release/"' in text(ui.get(f"/claims/{big.pk}/"))
    confirm = ui.get(f"/claims/{big.pk}/release/")
    assert "Release claim default/big?" in text(confirm)
    with django_capture_on_commit_callbacks(execute=True):
        response = ui.post(f"/claims/{big.pk}/release/")
    assert response.status_code == 302 and response.url == f"/clusters/{cluster.pk}/claims/"
    assert not Claim.objects.filter(pk=big.pk).exists()
    assert not Allocation.objects.filter(claim_id=big.pk).exists()
    assert not GpuShare.objects.filter(allocation__claim_id=big.pk).exists()
    late.refresh_from_db()
    assert late.status == "allocated"  # the freed memory went to the waiting claim
    assert ui.get(f"/claims/{big.pk}/").status_code == 404


# --- tenancy and roles -----------------------------------------------------------------------------


@pytest.fixture
def foreign_claim(make_member, make_cluster, make_pool) -> Claim:
    owner = make_member("globex", "owner")
    other = owner.memberships.get().tenant
    cluster = make_cluster(other, "secret-cluster")
    pool = make_pool(cluster, name="frac", nodes=1, gpus_per_node=1, sharing_mode="fractional")
    reconcile(pool.pk)
    claim = create_claim(
        context=TenantContext(other, "owner"),
        cluster=cluster,
        name="secret",
        kind="fraction",
        compute_percent=10,
    )
    assert claim.status == "allocated"
    return claim


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/claims/{claim}/"),
        ("get", "/claims/{claim}/release/"),
        ("post", "/claims/{claim}/release/"),
        ("get", "/clusters/{cluster}/claims/"),
        ("get", "/clusters/{cluster}/claims/new/"),
        ("post", "/clusters/{cluster}/claims/new/"),
    ],
)
def test_another_tenants_claims_are_404(ui, foreign_claim, method, path):
    url = path.format(claim=foreign_claim.pk, cluster=foreign_claim.cluster_id)
    response = getattr(ui, method)(url, {**FRACTION, "name": "sneaky"} if method == "post" else None)
    assert response.status_code == 404
    assert Claim.objects.get(pk=foreign_claim.pk).status == "allocated"
    assert not Claim.objects.filter(name="sneaky").exists()


@pytest.fixture
def viewer_ui(make_member, ui_for):
    return ui_for(make_member("acme", "viewer"))


def test_viewer_sees_no_create_or_release_controls(ui, viewer_ui, cluster, frac_pool):
    create(ui, cluster)
    claim = Claim.objects.get(name="infer")
    for path in [f"/clusters/{cluster.pk}/", f"/clusters/{cluster.pk}/claims/", f"/claims/{claim.pk}/"]:
        response = viewer_ui.get(path)
        assert response.status_code == 200
        page = text(response)
        assert "/claims/new/" not in page and "/release/" not in page
    assert "default/infer" in text(viewer_ui.get(f"/pools/{frac_pool.pk}/"))  # reading is allowed


def test_viewer_cannot_create_or_release(ui, viewer_ui, cluster, frac_pool):
    create(ui, cluster)
    claim = Claim.objects.get(name="infer")
    assert viewer_ui.get(f"/clusters/{cluster.pk}/claims/new/").status_code == 403
    assert create(viewer_ui, cluster, name="mine").status_code == 403
    assert viewer_ui.get(f"/claims/{claim.pk}/release/").status_code == 403
    assert viewer_ui.post(f"/claims/{claim.pk}/release/").status_code == 403
    assert list(Claim.objects.values_list("name", "status")) == [("infer", "allocated")]
    assert Allocation.objects.filter(claim=claim).exists()
