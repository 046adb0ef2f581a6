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


class ControlPlane:
    """A real HTTP server on loopback answering the agent's posts from a script of (status, headers)."""

    def __init__(self, answers: list[tuple[int, dict]]):
        import http.server
        import json
        import threading

        self.answers, self.posts = list(answers), []
        plane = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                plane.posts.append(body["samples"])
                status, headers = plane.answers.pop(0) if plane.answers else (202, {})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                reply = json.dumps({"accepted": len(body["samples"])} if status == 202 else {}).encode()
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def samples(n: int, start: int = 0) -> list[dict]:
    return [
        {"gpu": "g", "ts": float(i), "metrics": {"DCGM_FI_DEV_GPU_UTIL": 1}} for i in range(start, start + n)
    ]


def test_a_busy_control_plane_is_retried_after_its_retry_after_with_jitter_and_the_backlog_kept():
    plane = ControlPlane([(503, {"Retry-After": "2"}), (429, {"Retry-After": "4"})])
    try:
        sender = agent.Sender(plane.url, "t", rng=__import__("random").Random(1))
        sender.add(samples(3))
        assert not sender.flush(100.0)  # 503, Retry-After: 2
        assert 102.0 <= sender.not_before <= 103.0 and len(sender.backlog) == 3
        assert not sender.flush(sender.not_before - 0.01) and len(plane.posts) == 1  # too early: no post
        sender.add(samples(2, start=3))
        assert not sender.flush(sender.not_before)  # 429, Retry-After: 4
        first_wait = sender.not_before
        assert not sender.flush(first_wait - 0.01) and len(plane.posts) == 2
        assert sender.flush(first_wait)  # 202: everything kept meanwhile went, oldest first
        assert [s["ts"] for s in plane.posts[-1]] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert sender.backlog == [] and sender.dropped == 0
    finally:
        plane.close()


def test_the_backlog_is_bounded_and_counts_what_it_drops():
    sender = agent.Sender("http://127.0.0.1:9", "t", max_backlog=4)
    sender.add(samples(3))
    sender.add(samples(3, start=3))
    assert [s["ts"] for s in sender.backlog] == [2.0, 3.0, 4.0, 5.0] and sender.dropped == 2


def test_an_unreachable_control_plane_is_retried_with_growing_jittered_waits():
    sender = agent.Sender("http://127.0.0.1:9", "t", rng=__import__("random").Random(2))  # nothing listens
    sender.add(samples(1))
    waits, now = [], 0.0
    for _ in range(8):
        assert not sender.flush(now)
        waits.append(sender.not_before - now)
        now = sender.not_before
    for attempt, wait in enumerate(waits):
        base = min(agent.MAX_BACKOFF_S, 2.0**attempt)
        assert base <= wait <= 1.5 * base
    assert len({round(w / min(agent.MAX_BACKOFF_S, 2.0**i), 3) for i, w in enumerate(waits)}) > 1  # jittered
    assert len(sender.backlog) == 1
