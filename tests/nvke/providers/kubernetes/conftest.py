import uuid

import pytest

from nvke.tenancy.context import TenantContext


@pytest.fixture
def context(owner):
    membership = owner.memberships.get()
    return TenantContext(membership.tenant, membership.role)


@pytest.fixture
def sharing_pool(context):
    """sharing_pool(cluster, mode, model, gpus_per_node, nodes, **fields) -> a pool of an attached
    cluster made through the service (its mode's defaults applied) and reconciled once."""
    from catalog.models import DriverRelease, GpuModel
    from nodepools.services import create_pool, reconcile

    def make(cluster, mode, model="a10", gpus_per_node=1, nodes=1, name="infer", **fields):
        pool = create_pool(
            context=context,
            cluster=cluster,
            name=name,
            gpu_model=GpuModel.objects.get(name=model),
            gpus_per_node=gpus_per_node,
            node_count=nodes,
            min_nodes=0,
            max_nodes=nodes,
            driver_release=DriverRelease.objects.get(version="580.126.09"),
            sharing_mode=mode,
            **fields,
        )
        reconcile(pool.pk)
        return pool

    return make


@pytest.fixture
def scratch(target):
    """A namespace of this test's own, deleted afterwards with what was made in it (for the both-targets
    scenarios: their module defines `target`)."""
    server, _ = target
    name = f"nvke-test-{uuid.uuid4().hex[:8]}"
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    server.delete("v1", "Namespace", name)
