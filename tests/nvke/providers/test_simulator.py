"""The simulator honours both halves of the provider contract the control plane relies on."""

import datetime
import threading

import pytest
from django.db import connection
from django.utils import timezone

from nvke.providers import get_infrastructure, operations_for
from nvke.providers.base import ClusterRef, DrainStatus, PoolSpec, ProviderError
from nvke.providers.simulator.models import SimFault, SimNode
from nvke.providers.simulator.provider import SimulatorInfrastructure, SimulatorOperations


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
def sim(catalog) -> SimulatorInfrastructure:
    infrastructure = get_infrastructure(ClusterRef(name="", endpoint="", token=""))
    assert isinstance(infrastructure, SimulatorInfrastructure)
    access = infrastructure.provision_cluster("c1", "eu-west-1", 1)
    assert infrastructure.provision_cluster("c1", "eu-west-1", 1) == access  # idempotent
    return infrastructure


@pytest.fixture
def ops(sim) -> SimulatorOperations:
    access = sim.provision_cluster("c1", "eu-west-1", 1)
    operations = operations_for(ClusterRef("c1", access.endpoint, access.token, access.ca_bundle))
    assert isinstance(operations, SimulatorOperations)
    return operations


@pytest.mark.django_db
def test_node_operations(sim, ops):
    assert sim.scale_pool(spec(), 1).complete
    (node,) = ops.list_nodes("p")
    assert node.labels["nvke.io/pool"] == "p" and len(node.gpus) == 8
    assert len({gpu.nvlink_domain for gpu in node.gpus}) == 1
    ops.cordon(node.name)
    assert ops.list_nodes()[0].unschedulable is True
    ops.uncordon(node.name)
    assert ops.list_nodes()[0].unschedulable is False
    ops.set_node_labels(
        node.name, {"nvidia.com/gpu-driver-upgrade-state": "upgrade-required", "nvke.io/pool": None}
    )
    labels = ops.list_nodes()[0].labels
    assert (
        labels["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-required" and "nvke.io/pool" not in labels
    )
    assert ops.driver_version(node.name) == "580.105.08"
    with pytest.raises(ProviderError) as missing:
        ops.cordon("no-such-node")
    assert missing.value.reason == "NodeNotFound"


@pytest.mark.django_db
def test_operations_need_the_clusters_own_token(sim, ops):
    with pytest.raises(ProviderError) as refused:
        operations_for(ClusterRef("c1", ops.cluster.endpoint, "not-the-token")).list_nodes()
    assert refused.value.reason == "Unauthorized"
    with pytest.raises(ProviderError) as missing:
        operations_for(ClusterRef("c9", "https://c9", "t")).list_nodes()
    assert missing.value.reason == "ClusterNotFound"


def test_a_cluster_ref_never_prints_its_token_or_ca():
    ref = ClusterRef("c1", "https://c1.example:6443", "s3cret-token", "-----BEGIN CERTIFICATE-----")
    for text in (repr(ref), str(ref), f"{ref}", repr([ref])):
        assert "s3cret-token" not in text and "BEGIN CERTIFICATE" not in text
        assert "https://c1.example:6443" in text


@pytest.mark.django_db
def test_injected_faults_fire_the_given_number_of_times(sim, ops):
    sim.scale_pool(spec(), 1)
    node = ops.list_nodes()[0].name
    SimFault.objects.create(
        operation="cordon", target=node, reason="ApiServerDown", message="503", remaining=2
    )
    for _ in range(2):
        with pytest.raises(ProviderError) as failed:
            ops.cordon(node)
        assert (failed.value.reason, failed.value.message) == ("ApiServerDown", "503")
    ops.cordon(node)  # the third call goes through
    assert ops.list_nodes()[0].unschedulable


@pytest.mark.django_db
def test_a_drain_cordons_takes_its_simulated_time_and_repeating_it_changes_nothing(sim, ops, monkeypatch):
    monkeypatch.setenv("NVKE_SIM_UPGRADE_STEP_S", "evict=600")
    sim.scale_pool(spec(), 1)
    node = ops.list_nodes()[0].name
    assert ops.drain_status(node) == DrainStatus(done=False, pods_left=1)  # never drained: workloads
    ops.drain(node)
    busy_until = SimNode.objects.get(name=node).busy_until
    ops.drain(node)
    assert SimNode.objects.get(name=node).busy_until == busy_until  # not restarted
    assert ops.list_nodes()[0].unschedulable and not ops.drain_status(node).done
    SimNode.objects.filter(name=node).update(busy_until=timezone.now() - datetime.timedelta(seconds=1))
    assert ops.drain_status(node) == DrainStatus(done=True)
    ops.uncordon(node)  # schedulable again: workloads may land, a later drain has work to do
    assert not ops.drain_status(node).done


@pytest.mark.django_db
def test_a_drain_fault_keeps_the_drain_blocked_by_a_disruption_budget_until_it_is_used_up(sim, ops):
    sim.scale_pool(spec(), 1)
    node = ops.list_nodes()[0].name
    SimFault.objects.create(
        operation="drain", target=node, reason="DisruptionBudget", message="pdb/trainer allows 0", remaining=2
    )
    for _ in range(2):
        ops.drain(node)  # a refused eviction is not an error: the drain waits, and is called again
        status = ops.drain_status(node)
        assert (status.done, status.blocked, status.reason, status.message) == (
            False,
            True,
            "DisruptionBudget",
            "pdb/trainer allows 0",
        )
        assert status.pods_left == 1
    ops.drain(node)  # the budget allows it now
    assert ops.drain_status(node) == DrainStatus(done=True)


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
