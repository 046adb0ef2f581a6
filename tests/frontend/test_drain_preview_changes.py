"""An upgrade's preview says when a claim it moves would land on another GPU model or another sharing
mode (another isolation): an L4 fraction moved onto a time-slicing A10 is not the same claim."""

import re

import pytest

from claims.allocator import create_claim
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db


def test_a_move_onto_another_model_and_isolation_says_so(ui, tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    one = {"nodes": 1, "gpus_per_node": 1}
    l4 = make_pool(cluster, name="l4", gpu_model="l4", sharing_mode="fractional", **one)
    a10 = make_pool(cluster, name="a10", gpu_model="a10", sharing_mode="time-slicing", **one)
    for pool in (l4, a10):
        reconcile(pool.pk)
    claim = create_claim(
        context=TenantContext(tenant, "owner"), cluster=cluster, name="infer", kind="fraction", pool=None,
        gpu_memory_mib=2048, compute_percent=20,
    )  # fmt: skip
    upgraded = claim.allocation.node.pool
    page = ui.get(f"/pools/{upgraded.pk}/upgrade/").content.decode()
    row = re.search(rf'<tr data-drain-claim="{claim.pk}">(.*?)</tr>', page, re.S)[1]
    other = a10 if upgraded == l4 else l4
    models = {l4: "L4 24GB", a10: "A10 24GB"}
    assert f"GPU model {models[upgraded]} → {models[other]}" in row
    assert f"sharing {upgraded.sharing_mode} → {other.sharing_mode} (another isolation)" in row
