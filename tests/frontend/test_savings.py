"""The overview's savings from sharing: whole-card GPUs against GPUs in use, memory held against the
cards in use, per cluster and pool; and the last week's GPU-hours from metering."""

import pytest

from claims.allocator import create_claim
from claims.savings import savings
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


@pytest.fixture
def shared_a10(tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(
        cluster,
        name="a10",
        gpu_model="a10",
        nodes=1,
        gpus_per_node=2,
        sharing_mode="time-slicing",
        compute_oversubscription_percent=200,
        default_guaranteed_percent=10,
    )
    reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    for name, memory, compute in [("train", 8192, 70)] + [(f"infer-{i}", 2048, 20) for i in range(3)]:
        claim = create_claim(
            context=context,
            cluster=cluster,
            name=name,
            kind="fraction",
            gpu_memory_mib=memory,
            compute_percent=compute,
            pool=pool,
        )
        assert claim.status == "allocated"
    return pool


def test_four_claims_on_one_card_save_three(tenant, shared_a10):
    (cluster,), (pool,) = savings(tenant)
    assert (pool.name, cluster.name) == ("prod/a10", "prod")
    gpus_in_use = pool.gpus_used
    assert pool.whole_card_gpus == 4 and gpus_in_use in (1, 2)  # fgd may spread, never past the cards
    assert pool.gpus_saved == 4 - gpus_in_use and pool.memory_held_mib == 14 * 1024
    assert pool.memory_use_percent == pytest.approx(100 * 14 * 1024 / pool.memory_on_cards_mib)
    assert cluster.whole_card_gpus == pool.whole_card_gpus


def test_the_overview_shows_them(ui, tenant, shared_a10, make_member):
    page = ui.get("/").content.decode()
    assert 'data-savings-row="prod/a10"' in page and 'data-savings-row="prod"' in page
    assert "14Gi /" in page and "data-savings-week" in page
    stranger = make_member("globex", "owner")
    from django.test import Client

    other = Client()
    other.force_login(stranger)
    assert 'data-savings-row="prod/a10"' not in other.get("/").content.decode()
