"""The node page: each GPU's memory and compute drawn to scale per claim, MIG slices at their slots,
health, and the host resources its claims hold."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from claims.allocator import create_claim
from claims.models import GpuShare
from nodepools.models import Gpu, Node
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

from .helpers import text

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(tenant, make_cluster):
    return make_cluster(tenant, "prod")


def one_node(make_pool, cluster, **pool):
    pool = make_pool(cluster, nodes=1, gpus_per_node=1, **pool)
    reconcile(pool.pk)
    return Node.objects.get(pool=pool)


def claim(tenant, cluster, name, **fields):
    return create_claim(context=TenantContext(tenant, "owner"), cluster=cluster, name=name, **fields)


def drawn(page: str, attr: str) -> dict[int, str]:
    """Claim pk -> the inline style of its segment, for data-claim-segment (memory) or data-claim-compute."""
    return {
        int(pk): style for style, pk in re.findall(rf'style="([^"]*)" title="[^"]*" {attr}="(\d+)"', page)
    }


def test_memory_and_compute_of_each_claim_are_drawn_to_scale(ui, tenant, cluster, make_pool):
    node = one_node(make_pool, cluster, name="frac", sharing_mode="fractional")
    a = claim(tenant, cluster, "a", kind="fraction", gpu_memory_mib=4096, compute_percent=50, cpu_milli=2000)
    b = claim(tenant, cluster, "b", kind="fraction", gpu_memory_mib=8192, compute_percent=25)
    page = text(ui.get(f"/nodes/{node.pk}/"))
    # 4096 and 8192 MiB of the L4's 23034 side by side; 50% and 25% of its compute after each other
    assert drawn(page, "data-claim-segment") == {
        a.pk: "left: 0%; width: 17.78%",
        b.pk: "left: 17.78%; width: 35.56%",
    }
    assert drawn(page, "data-claim-compute") == {a.pk: "left: 0%; width: 50%", b.pk: "left: 50%; width: 25%"}
    # The memory figure is the memory held (12288 of 23034 MiB), apart from the compute guaranteed.
    assert "12Gi / 22.5Gi (53%)" in page and "75% guaranteed" in page
    assert "22.5Gi, 75%" not in page
    # A fractional pool does not oversubscribe: the ceilings are the guarantees, on the GPU's 100%.
    assert drawn(page, "data-claim-ceiling") == drawn(page, "data-claim-compute")
    assert "75% of 100% ceilings" in page
    assert f"2 / {node.cpu_millicores / 1000:g} cores" in page  # host CPU held by claim a
    assert ">2</dd>" in page  # claims on it


def test_guarantees_and_oversubscribed_ceilings_are_told_apart(ui, tenant, cluster, make_pool):
    node = one_node(
        make_pool,
        cluster,
        name="shared",
        sharing_mode="time-slicing",
        compute_oversubscription_percent=200,
        default_guaranteed_percent=10,
    )
    a = claim(tenant, cluster, "a", kind="fraction", gpu_memory_mib=1024, compute_percent=70)
    b = claim(tenant, cluster, "b", kind="fraction", gpu_memory_mib=1024, compute_percent=60)
    page = text(ui.get(f"/nodes/{node.pk}/"))
    assert drawn(page, "data-claim-compute") == {a.pk: "left: 0%; width: 10%", b.pk: "left: 10%; width: 10%"}
    # Ceilings (130%) on the pool's 200% budget; the GPU's own 100% ends halfway.
    assert drawn(page, "data-claim-ceiling") == {a.pk: "left: 0%; width: 35%", b.pk: "left: 35%; width: 30%"}
    assert 'class="gpu-end" style="left: 50%"' in page
    assert "20% guaranteed" in page and "130% of 200% ceilings" in page
    assert "10% of 70%" in page  # the claim list under the GPU


def test_mig_slices_sit_at_their_slots_with_the_slot_axis(ui, tenant, cluster, make_pool):
    node = one_node(make_pool, cluster, name="mig", gpu_model="h100-sxm5-80gb", sharing_mode="mig")
    s1 = claim(tenant, cluster, "s1", kind="mig", mig_profile="3g.40gb")
    s2 = claim(tenant, cluster, "s2", kind="mig", mig_profile="3g.40gb")
    starts = {s.allocation.claim_id: s.mig_start for s in GpuShare.objects.select_related("allocation")}
    assert sorted(starts.values()) == [0, 4]
    page = text(ui.get(f"/nodes/{node.pk}/"))
    assert drawn(page, "data-claim-segment") == {
        pk: f"left: {start * 12.5:g}%; width: 50%" for pk, start in starts.items()
    }
    assert '<div class="mig-slots" aria-hidden="true"><span>0</span><span>1</span>' in page
    assert {s1.pk, s2.pk} == set(drawn(page, "data-claim-compute"))


def test_an_unhealthy_gpu_says_so(ui, cluster, make_pool):
    node = one_node(make_pool, cluster, name="l4")
    Gpu.objects.filter(node=node).update(healthy=False)
    page = text(ui.get(f"/nodes/{node.pk}/"))
    assert 'class="card gpu-card gpu-unhealthy"' in page
    assert "unhealthy — no new claims land here" in page


def test_pool_page_links_each_node(ui, cluster, make_pool):
    node = one_node(make_pool, cluster, name="l4")
    assert f'href="/nodes/{node.pk}/"' in text(ui.get(f"/pools/{node.pool_id}/"))


def test_node_page_queries_do_not_grow_with_claims(ui, tenant, cluster, make_pool):
    node = one_node(make_pool, cluster, name="frac", sharing_mode="fractional")
    claim(tenant, cluster, "one", kind="fraction", gpu_memory_mib=1024)
    with CaptureQueriesContext(connection) as one:
        ui.get(f"/nodes/{node.pk}/")
    for name in ["two", "three"]:
        claim(tenant, cluster, name, kind="fraction", gpu_memory_mib=1024)
    with CaptureQueriesContext(connection) as three:
        page = text(ui.get(f"/nodes/{node.pk}/"))
    assert page.count("data-claim-segment=") == 3
    assert len(three.captured_queries) == len(one.captured_queries)


def test_another_tenants_node_is_404(ui, make_member, make_cluster, make_pool):
    other = make_cluster(make_member("globex").memberships.get().tenant, "theirs")
    node = one_node(make_pool, other, name="l4")
    assert ui.get(f"/nodes/{node.pk}/").status_code == 404
