"""The simulator's driver installs: simulated duration, idempotence, injected and random failures."""

import datetime

import pytest
from django.utils import timezone

from clusters.services import cluster_operations
from nodepools.models import Node
from nvke.providers.simulator.models import SimFault, SimNode

pytestmark = pytest.mark.django_db
NEW = "595.71.05"


@pytest.fixture
def node(make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    return cluster_operations(pool.cluster), Node.objects.get(pool=pool).name


def finish_now(name: str) -> None:
    """Let the simulated install's time pass."""
    SimNode.objects.filter(name=name).update(busy_until=timezone.now() - datetime.timedelta(seconds=1))


def test_install_takes_its_simulated_time_and_repeating_it_changes_nothing(node, monkeypatch):
    monkeypatch.setenv("NVKE_SIM_UPGRADE_STEP_S", "install=600")
    provider, name = node
    provider.install_driver(name, NEW)
    status = provider.driver_status(name)
    assert (status.busy, status.version) == (True, "580.105.08")
    busy_until = SimNode.objects.get(name=name).busy_until
    provider.install_driver(name, NEW)
    assert SimNode.objects.get(name=name).busy_until == busy_until  # not restarted
    finish_now(name)
    status = provider.driver_status(name)
    assert (status.busy, status.version, status.failure, status.gpus_healthy) == (False, NEW, "", True)
    assert provider.list_nodes()[0].labels["nvidia.com/cuda.driver.major"] == "595"


def test_injected_install_failure_keeps_the_old_driver_until_a_retry(node):
    provider, name = node
    SimFault.objects.create(operation="install_driver", target=name, reason="DkmsBuildFailed", message="gcc")
    provider.install_driver(name, NEW)
    status = provider.driver_status(name)
    assert (status.version, status.failure) == ("580.105.08", "DkmsBuildFailed: gcc")
    provider.install_driver(name, NEW)
    assert (provider.driver_status(name).version, provider.driver_status(name).failure) == (
        NEW,
        "",
    )


def test_validate_fault_brings_a_gpu_back_unhealthy(node):
    provider, name = node
    SimFault.objects.create(operation="validate", target=name)
    provider.install_driver(name, NEW)
    status = provider.driver_status(name)
    assert (status.version, status.gpus_healthy) == (NEW, False)


def test_failure_rate_one_fails_every_install(node, monkeypatch):
    monkeypatch.setenv("NVKE_SIM_DRIVER_FAILURE_RATE", "1")
    provider, name = node
    provider.install_driver(name, NEW)
    assert provider.driver_status(name).failure.startswith("SimulatedInstallFailure")
