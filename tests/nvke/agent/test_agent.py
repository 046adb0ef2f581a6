"""nvke-agent: the NVML path with a fake pynvml injected at import, the post to a real server, the
refusals; and, opt-in (NVKE_REAL_GPU_TEST=1), a real GPU."""

import os
import sys
import time

import pytest

from nodepools.models import Gpu
from nvke.agent import main as agent
from nvke.agent import nvml
from telemetry import store
from telemetry.models import NodeToken

from . import fake_pynvml

GIB = 1024**3


def fake_gpus(uuids: list[str]) -> list[dict]:
    return [
        {
            "uuid": f"GPU-{u}",
            "util": 40 + i,
            "used": (i + 1) * GIB,
            "temp": 60,
            "power_mw": 123_456,
            "sm": 1755,
        }
        for i, u in enumerate(uuids)
    ]


def test_collector_reads_nvml_as_dcgm_fields(monkeypatch):
    gpus = fake_gpus(["AAAA-1", "bbbb-2"])
    del gpus[1]["sm"]  # this GPU does not report its clock
    fake = fake_pynvml.make(gpus, xids=[(1, 79)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    collector = nvml.NvmlCollector(nvml.load())
    assert fake.state["initialised"] and fake.state["registered"] == [(0, 0x8), (1, 0x8)]
    first, second = collector.sample(1000.0)
    assert first == {
        "gpu": "aaaa-1",
        "ts": 1000.0,
        "metrics": {
            "DCGM_FI_DEV_GPU_UTIL": 40,
            "DCGM_FI_DEV_FB_USED": 1024,  # MiB
            "DCGM_FI_DEV_GPU_TEMP": 60,
            "DCGM_FI_DEV_POWER_USAGE": 123.456,  # W
            "DCGM_FI_DEV_SM_CLOCK": 1755,
            "DCGM_FI_DEV_XID_ERRORS": 0,
        },
    }
    assert "DCGM_FI_DEV_SM_CLOCK" not in second["metrics"]
    assert second["metrics"]["DCGM_FI_DEV_XID_ERRORS"] == 79
    assert collector.sample(1001.0)[1]["metrics"]["DCGM_FI_DEV_XID_ERRORS"] == 0  # each XID once
    collector.close()
    assert fake.state["shut_down"]


@pytest.mark.parametrize("broken", ["missing module", "no driver"])
def test_without_nvml_the_agent_exits_with_a_clear_message(broken, monkeypatch, capsys):
    fake = None if broken == "missing module" else fake_pynvml.make([], init_error="Driver Not Loaded")
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # None makes `import pynvml` fail
    assert agent.main(["--url", "http://127.0.0.1:9", "--token", "t", "--once"]) == agent.EXIT_NO_NVML
    err = capsys.readouterr().err
    assert "cannot read GPUs" in err and "--simulate" in err
    assert ("nvidia-ml-py" if broken == "missing module" else "Driver Not Loaded") in err


@pytest.mark.integration
def test_agent_posts_a_batch_the_control_plane_stores(asgi_server, node, monkeypatch, clean_redis):
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make(fake_gpus([str(g.uuid) for g in gpus])))
    _, raw = NodeToken.issue(node)
    before = time.time()
    assert agent.main(["--url", asgi_server.url, "--token", raw, "--once"]) == 0
    latest = store.latest([g.pk for g in gpus])
    assert [latest[g.pk]["util"] for g in gpus] == [40, 41]
    assert latest[gpus[1].pk]["mem"] == 2048 and latest[gpus[0].pk]["ts"] >= before
    node.refresh_from_db()  # its sharing preflight facts came first
    assert node.preflight["driver_version"] == "580.105.08" and node.preflight["nvml_memory"] is True

    # A wrong token: refused, and the agent stops (resending cannot help).
    assert agent.main(["--url", asgi_server.url, "--token", "nvkenode_wrong", "--once"]) == 1


@pytest.mark.integration
def test_simulated_agent_needs_no_gpu(asgi_server, node, monkeypatch, clean_redis):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    gpu = node.gpus.first()
    _, raw = NodeToken.issue(node)
    args = ["--url", asgi_server.url, "--token", raw, "--once", "--simulate", f"GPU-{gpu.uuid}"]
    assert agent.main(args) == 0
    assert 0 <= store.latest([gpu.pk])[gpu.pk]["util"] <= 100


@pytest.mark.skipif(
    os.environ.get("NVKE_REAL_GPU_TEST") != "1", reason="opt-in: NVKE_REAL_GPU_TEST=1 on a GPU node"
)
def test_real_gpu_through_nvml():
    collector = nvml.NvmlCollector(nvml.load())
    try:
        samples = collector.sample(time.time())
    finally:
        collector.close()
    assert samples
    for s in samples:
        metrics = s["metrics"]
        assert len(s["gpu"]) == 36 and not s["gpu"].startswith("gpu-")
        assert 0 <= metrics["DCGM_FI_DEV_GPU_UTIL"] <= 100
        assert metrics["DCGM_FI_DEV_FB_USED"] >= 0 and 0 < metrics["DCGM_FI_DEV_GPU_TEMP"] < 120
        assert 0 < metrics["DCGM_FI_DEV_POWER_USAGE"] < 2000  # watts, not milliwatts
        print(s)


@pytest.mark.integration
def test_on_an_attached_cluster_the_agent_names_the_gpus_then_posts(
    asgi_server, attach, gpu_cluster, monkeypatch, clean_redis, make_attached_pool
):
    """Without NVIDIA's DRA driver only the agent knows the GPUs' UUIDs: it registers them first."""
    from nodepools.models import Node

    cluster = attach(gpu_cluster)
    node = Node.objects.get(pool=make_attached_pool(cluster, 1))
    nvml = [f"{i:08x}-1111-2222-3333-444455556666" for i in range(8)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make(fake_gpus(nvml)))
    _, raw = NodeToken.issue(node)
    assert agent.main(["--url", asgi_server.url, "--token", raw, "--once"]) == 0
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    assert [str(g.uuid) for g in gpus] == nvml
    assert set(store.latest([g.pk for g in gpus])) == {g.pk for g in gpus}
