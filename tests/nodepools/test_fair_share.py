"""Fair shares of a short region (nodepools/fair_share.py, applied by nodepools/capacity.py): a tenant
asking for a little gets it, the rest is split evenly, nobody's running nodes are taken away, and the
GPUs that free up go to the tenant held back, not back to the one that asked for everything."""

import pytest

from nodepools import services
from nodepools.fair_share import Demand, shares
from nodepools.models import Node, NodePool
from nvke.tenancy.context import TenantContext
from nvke.tenancy.models import Tenant


def d(pool, tenant, nodes, gpus_per_node=1, order=None):
    return Demand(pool, tenant, gpus_per_node, nodes, (order if order is not None else pool,))


@pytest.mark.parametrize(
    ("total", "demands", "expected"),
    [
        pytest.param(64, [d(1, "a", 10), d(2, "b", 8)], {1: 10, 2: 8}, id="plenty: all asked"),
        pytest.param(64, [d(1, "a", 10_000), d(2, "b", 8)], {1: 56, 2: 8}, id="small ask whole, rest big"),
        pytest.param(30, [d(1, "a", 20), d(2, "b", 20), d(3, "c", 20)], {1: 10, 2: 10, 3: 10}, id="even"),
        pytest.param(20, [d(1, "a", 3, 8), d(2, "b", 3, 8)], {1: 1, 2: 1}, id="leftover fits no node"),
        pytest.param(10, [d(1, "a", 2, 8), d(2, "b", 10)], {1: 1, 2: 2}, id="mixed node sizes"),
        pytest.param(6, [d(1, "a", 4), d(2, "a", 4)], {1: 4, 2: 2}, id="a tenant's pools, oldest first"),
        pytest.param(
            12, [d(1, "a", 8), d(2, "a", 8), d(3, "b", 8)], {1: 6, 2: 0, 3: 6}, id="tenants, not pools"
        ),
        pytest.param(0, [d(1, "a", 4)], {1: 0}, id="nothing there"),
    ],
)
def test_shares(total, demands, expected):
    assert shares(total, demands) == expected


@pytest.fixture
def pool_fields(catalog):
    from catalog.models import DriverRelease, GpuModel

    return {
        "gpu_model": GpuModel.objects.get(name="l4"),
        "gpus_per_node": 1,
        "min_nodes": 0,
        "driver_release": DriverRelease.objects.get(version="580.105.08"),
    }


def test_a_tenant_asking_for_everything_does_not_starve_another(
    make_cluster, make_member, client_for, pool_fields, settings, django_capture_on_commit_callbacks
):
    """eu-west-1 has 32 L4s. Tenant A asks for 40 one-GPU nodes and gets all 32; B asks for 8 and
    waits (nothing is taken from A). When A gives back two and at once asks for them again, it does not
    get them (its fair share with B asking is 24; it keeps the 30 it has): B's next step takes them."""
    settings.NVKE_DEFAULT_GPU_QUOTA = 64
    a, b = (Tenant.objects.create(name=n, slug=n) for n in ("a", "b"))
    cluster_a, cluster_b = make_cluster(a, region="eu-west-1"), make_cluster(b, region="eu-west-1")

    def create(tenant, cluster, nodes):
        with django_capture_on_commit_callbacks(execute=True):
            return services.create_pool(
                context=TenantContext(tenant, "owner"),
                cluster=cluster,
                name="l4",
                node_count=nodes,
                max_nodes=nodes,
                **pool_fields,
            )

    def state(pool):
        pool.refresh_from_db()
        return Node.objects.filter(pool=pool).count(), pool.status, pool.status_reason

    pool_a = create(a, cluster_a, 40)
    assert state(pool_a) == (32, "pending", "InsufficientCapacity")  # alone: the region's size
    pool_b = create(b, cluster_b, 8)
    assert state(pool_b) == (0, "pending", "InsufficientCapacity")
    region = client_for(make_member("b", "viewer")).get("/api/v1/regions/eu-west-1/").data
    assert {"gpu_model": "l4", "available_gpus": 0, "limited_by": "capacity", "quota_left_gpus": 56} in (
        region["inventory"]
    )
    with django_capture_on_commit_callbacks(execute=True):
        services.update_pool(pool_a, node_count=30)
    with django_capture_on_commit_callbacks(execute=True):  # A asks again before B's next step
        services.update_pool(pool_a, node_count=40)
    assert state(pool_a) == (30, "pending", "FairShare")
    services.reconcile(pool_b.pk)  # beat's resync of unsettled pools
    assert state(pool_b) == (2, "pending", "InsufficientCapacity")
    assert "may have 30 of its 40 nodes now" in pool_a.status_message
    assert "32" not in pool_a.status_message  # the region's total is not the tenant's to know
    with django_capture_on_commit_callbacks(execute=True):
        services.update_pool(pool_a, node_count=20)  # A shrinks below its share: B takes what frees
    services.reconcile(pool_b.pk)
    assert state(pool_b) == (8, "ready", "")
    assert NodePool.objects.get(pk=pool_a.pk).node_count == 20


def test_regions_show_what_the_tenant_may_get(make_cluster, make_pool, make_member, client_for, settings):
    """Each bound in turn: another tenant's pool asking for 40 of the region's 32 L4s (holding none yet)
    leaves a newcomer its fair share, 16; a quota of its own below that binds instead."""
    from catalog.models import GpuModel
    from nvke.tenancy.models import GpuQuota

    settings.NVKE_DEFAULT_GPU_QUOTA = None
    other = Tenant.objects.create(name="Other", slug="other")
    make_pool(make_cluster(other, region="eu-west-1"), nodes=40, gpus_per_node=1)  # rows only: no nodes
    viewer = make_member("newcomer", "viewer")
    client = client_for(viewer)

    def l4():
        inventory = client.get("/api/v1/regions/eu-west-1/").data["inventory"]
        return next(row for row in inventory if row["gpu_model"] == "l4")

    assert l4() == {
        "gpu_model": "l4",
        "available_gpus": 16,
        "limited_by": "fair_share",
        "quota_left_gpus": None,
    }
    tenant = viewer.memberships.get().tenant
    GpuQuota.objects.create(tenant=tenant, gpu_model=GpuModel.objects.get(name="l4"), max_gpus=4)
    assert l4() == {"gpu_model": "l4", "available_gpus": 4, "limited_by": "quota", "quota_left_gpus": 4}
