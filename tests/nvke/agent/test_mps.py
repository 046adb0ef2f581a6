"""The MPS control daemon supervisor against a stand-in `nvidia-cuda-mps-control` (stand_in/): a daemon
per GPU, started again when it dies, and its state in the sharing preflight of an MPS pool's node."""

import os
import shutil
import signal
import tempfile
import time

import pytest

from nvke.agent import preflight
from nvke.agent.mps import MpsSupervisor
from nvke.agent.node_side import NodeSide

from .test_preflight import FIT

STAND_IN = os.path.join(os.path.dirname(__file__), "stand_in", "nvidia-cuda-mps-control")
GPUS = ["GPU-aaaa-1", "GPU-bbbb-2"]


@pytest.fixture
def supervisor():
    root = tempfile.mkdtemp(prefix="mps-", dir="/tmp")  # short: the daemon's control socket lives there
    mps = MpsSupervisor(GPUS, root=root, command=STAND_IN)
    yield mps
    mps.stop()
    shutil.rmtree(root, ignore_errors=True)


def daemon_pid(mps: MpsSupervisor, uuid: str) -> int:
    with open(os.path.join(mps.pipe_directory(uuid), "nvidia-cuda-mps-control.pid")) as pid:
        return int(pid.read())


def test_a_daemon_per_gpu_with_its_own_pipes(supervisor):
    assert not supervisor.answers(GPUS[0])
    assert supervisor.check() is True
    assert [supervisor.daemons[u].starts for u in GPUS] == [1, 1]
    assert daemon_pid(supervisor, GPUS[0]) != daemon_pid(supervisor, GPUS[1])
    assert supervisor.check() is True  # running daemons are left alone
    assert [supervisor.daemons[u].starts for u in GPUS] == [1, 1]


def test_a_daemon_that_dies_is_started_again(supervisor):
    supervisor.check()
    dead = daemon_pid(supervisor, GPUS[1])
    os.kill(dead, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while supervisor.answers(GPUS[1]):  # until the kernel has closed its socket
        assert time.monotonic() < deadline
    assert supervisor.check() is True
    assert supervisor.daemons[GPUS[1]].starts == 2 and supervisor.daemons[GPUS[0]].starts == 1
    assert daemon_pid(supervisor, GPUS[1]) != dead


def test_a_daemon_that_cannot_start_fails_the_mps_preflight_with_the_reason(supervisor, monkeypatch):
    monkeypatch.setenv("MPS_STAND_IN_FAIL", "no CUDA-capable device is detected")
    node = NodeSide(None, supervisor, health=dict)
    facts = {**FIT, **node.step()}
    assert facts["mps_daemon"] is False
    assert supervisor.daemons[GPUS[0]].error == "no CUDA-capable device is detected"
    assert "the MPS control daemon is not running on every GPU" in " ".join(preflight.failures(facts, "mps"))
    assert preflight.failures(facts, "time-slicing") == []  # only MPS pools need it


def test_a_running_daemon_passes_the_mps_preflight(supervisor):
    facts = {**FIT, **NodeSide(None, supervisor, health=dict).step()}
    assert facts["mps_daemon"] is True and preflight.failures(facts, "mps") == []


@pytest.mark.integration
def test_the_agent_reports_its_daemons_state_with_its_preflight_facts(
    asgi_server, node, supervisor, monkeypatch, clean_redis
):
    import argparse

    from nvke.agent import main as agent
    from nvke.agent.synthetic import SimulatedCollector
    from telemetry.models import NodeToken

    _, raw = NodeToken.issue(node)
    args = argparse.Namespace(url=asgi_server.url, token=raw, once=True, interval=1.0)
    collector = SimulatedCollector([f"GPU-{g.uuid}" for g in node.gpus.all()])
    monkeypatch.setenv("MPS_STAND_IN_FAIL", "no CUDA-capable device is detected")
    assert agent.run(collector, args, NodeSide(None, supervisor, health=dict)) == 0
    node.refresh_from_db()
    assert node.preflight["mps_daemon"] is False and node.preflight["driver_version"] == "580.105.08"
    monkeypatch.delenv("MPS_STAND_IN_FAIL")
    assert agent.run(collector, args, NodeSide(None, supervisor, health=dict)) == 0
    node.refresh_from_db()
    assert node.preflight["mps_daemon"] is True
