"""The simulator honours the Provider contract the control plane relies on."""

import threading

import pytest
from django.db import connection

from nvke.providers.base import PoolSpec, ProviderError
from nvke.providers.simulator.models import SimFault, SimNode
from nvke.providers.simulator.provider import SimulatorProvider


def spec(name="p", region="eu-west-1", model="h200-sxm-141gb", gpus=8, cluster="c1") -> PoolSpec:
    return PoolSpec(
        cluster=cluster,
        region=region,
        name=name,
        gpu_model=model,
        gpu_memory_mib=143771,
        gpus_per_node=gpus,
        nvlink=True,
        driver_version="580.105.08",
        cpu_millicores_per_node=1000,
        memory_mib_per_node=1024,
        labels={"nvke.io/pool": name},
    )


@pytest.fixture
def sim(catalog):
    provider = SimulatorProvider()
    provider.provision_cluster("c1", "eu-west-1", 1)
    return provider


@pytest.mark.django_db
def test_node_operations(sim):
    assert sim.scale_pool(spec(), 1).complete
    (node,) = sim.list_nodes("c1", "p")
    assert node.labels["nvke.io/pool"] == "p" and len(node.gpus) == 8
    assert len({gpu.nvlink_domain for gpu in node.gpus}) == 1
    sim.cordon("c1", node.name)
    assert sim.list_nodes("c1")[0].unschedulable is True
    sim.uncordon("c1", node.name)
    assert sim.list_nodes("c1")[0].unschedulable is False
    sim.set_node_labels(
        "c1", node.name, {"nvidia.com/gpu-driver-upgrade-state": "upgrade-required", "nvke.io/pool": None}
    )
    labels = sim.list_nodes("c1")[0].labels
    assert (
        labels["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-required" and "nvke.io/pool" not in labels
    )
    assert sim.driver_version("c1", node.name) == "580.105.08"
    with pytest.raises(ProviderError) as missing:
        sim.cordon("c1", "no-such-node")
    assert missing.value.reason == "NodeNotFound"


@pytest.mark.django_db
def test_injected_faults_fire_the_given_number_of_times(sim):
    sim.scale_pool(spec(), 1)
    node = sim.list_nodes("c1")[0].name
    SimFault.objects.create(
        operation="evict", target=node, reason="PDBViolation", message="budget", remaining=2
    )
    for _ in range(2):
        with pytest.raises(ProviderError) as failed:
            sim.evict("c1", node, "default", "trainer-0")
        assert (failed.value.reason, failed.value.message) == ("PDBViolation", "budget")
    sim.evict("c1", node, "default", "trainer-0")  # the third call goes through


@pytest.mark.django_db
def test_capacity_is_finite_and_scale_down_returns_it(sim):
    result = sim.scale_pool(spec(), 3)  # eu-west-1 has 16 H200s
    assert (result.nodes, result.wanted, result.reason) == (2, 3, "InsufficientCapacity")
    assert sim.scale_pool(spec(), 1).complete
    assert sim.scale_pool(spec(name="q"), 1).complete  # the freed board is available again
    assert SimNode.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_scale_never_overdraws_inventory(sim):
    """Four pools race for 16 GPUs on PostgreSQL; the inventory lock lets exactly two boards through."""
    barrier = threading.Barrier(4)
    results = []

    def scale(name):
        try:
            barrier.wait()
            results.append(sim.scale_pool(spec(name=name), 1))
        finally:
            connection.close()

    threads = [threading.Thread(target=scale, args=(f"p{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.nodes for r in results) == [0, 0, 1, 1]
    assert sum(len(n.gpus) for n in SimNode.objects.all()) == 16
