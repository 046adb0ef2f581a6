"""The crash test through the Kubernetes provider: a real Celery worker drives an attached cluster (the
fake API server, reached over HTTPS from the worker process) and is SIGKILLed twice mid-run; a new worker
finishes it. Never more nodes cordoned than the budget, at any moment, as the cluster itself sees it."""

import random
import threading
import time

import pytest

from catalog.models import DriverRelease
from nodepools.models import Node
from nvke.providers.kubernetes import gpus
from tests.kubeapi import objects
from tests.upgrades.conftest import check_invariants
from tests.upgrades.test_crash import broker, kill, start_worker  # noqa: F401 - broker is a fixture
from upgrades import services

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
TARGET = "580.105.08"
BUDGET = 2


@pytest.fixture
def cluster_clock(kubeapi):
    """Time passes on the fake cluster as it does here: pods' grace periods end, components react."""
    stop = threading.Event()

    def tick():
        while not stop.wait(0.1):
            kubeapi.settle(0.1)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(5)


def cordoned(server) -> int:
    return sum(bool(n["spec"].get("unschedulable")) for n in server.list("v1", "Node"))


@pytest.mark.usefixtures("broker", "cluster_clock")
def test_killed_worker_loses_nothing_on_a_kubernetes_cluster(
    context, attach, kubeapi, tmp_path, make_attached_pool
):
    objects.gpu_operator(kubeapi)
    names = [f"gpu-{i}" for i in range(6)]
    for name in names:
        kubeapi.create(objects.gpu_node(name, count=8))
        kubeapi.create(objects.pod(f"job-{name}", node=name, labels={"app": "train"}))
    kubeapi.actors.pod_grace_seconds = 1  # each drain waits for its pod's grace period
    cluster = attach(kubeapi)
    pool = make_attached_pool(cluster, 6)
    rng = random.Random()
    worker = start_worker(tmp_path)
    try:
        run = services.create_run(
            context=context,
            pool=pool,
            target_release=DriverRelease.objects.get(version=TARGET),
            max_unavailable=str(BUDGET),
            canary_nodes=1,
        )

        def watch(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                assert cordoned(kubeapi) <= BUDGET, "more nodes out than the budget"
                check_invariants(run)
                if run.finished:
                    return
                time.sleep(0.05)

        for _ in range(2):
            watch(rng.uniform(0.5, 2.5))
            assert not run.finished  # the kill lands mid-run
            kill(worker)
            worker = start_worker(tmp_path)
        watch(180)
        assert run.finished, f"run is {run.status} after the kills:\n{worker.log[-3000:]}"
    finally:
        worker.stop()
    assert run.status == "completed" and run.max_unavailable_seen <= BUDGET, run.message
    for node in kubeapi.list("v1", "Node"):
        assert node["metadata"]["labels"][gpus.DRIVER_FULL] == TARGET
        assert not node["spec"].get("unschedulable")
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", "cordoned")) == {(TARGET, False)}
    assert all(kubeapi.get("v1", "Pod", f"job-{name}", namespace="default") is None for name in names)
