"""Smoke test of the embedded default: `scripts/dev serve` with no DATABASE_URL or REDIS_URL (SQLite,
in-process tasks, in-memory channel layer) starts, seeds the demo tenant and serves the API and pages."""

import json

import pytest
import requests
from websockets.sync.client import connect

from .processes import demo_session, embedded_server

pytestmark = pytest.mark.integration


def test_embedded_default_serves_api_and_pages(tmp_path):
    with embedded_server(tmp_path) as (server, base):
        assert f"{base}/" in server.log and "demo / nvke-demo" in server.log
        assert (tmp_path / "nvke.sqlite3").exists()
        login_page = requests.get(f"{base}/login/", timeout=10)
        assert login_page.status_code == 200
        # The sign-in page says which demo account is which: a tenant's owner, the platform's operator.
        assert "<code>demo</code> / <code>nvke-demo</code>: owner of the Demo tenant" in login_page.text
        assert (
            "<code>operator</code> / <code>nvke-operator</code>: the platform&#x27;s operator"
            in login_page.text
        )
        browser = demo_session(base)
        assert browser.get(f"{base}/admin/", timeout=10).url.startswith(f"{base}/admin/login/")  # not staff

        root = browser.get(f"{base}/api/v1/", timeout=10)
        assert root.status_code == 200 and "clusters" in root.json()
        clusters = browser.get(f"{base}/api/v1/clusters/", timeout=10).json()["results"]
        assert [(c["name"], c["status"]) for c in clusters] == [("demo", "running")]
        pools = browser.get(f"{base}/api/v1/node-pools/", timeout=10).json()["results"]
        assert {p["name"]: p["status"] for p in pools} == {"inference-l4": "ready", "training-h100": "ready"}

        # Claims place and release in process (SQLite, eager tasks): the release's placement pass
        # runs on commit, under the same allocation lock.
        csrf_header = {"X-CSRFToken": browser.cookies["csrftoken"], "Referer": f"{base}/"}
        body = {"cluster": clusters[0]["id"], "kind": "fraction", "gpu_memory": "4Gi", "compute_percent": 50}
        first = browser.post(
            f"{base}/api/v1/claims/", json={**body, "name": "a"}, headers=csrf_header, timeout=10
        )
        assert first.status_code == 201 and first.json()["status"] == "allocated", first.text
        released = browser.delete(
            f"{base}/api/v1/claims/{first.json()['id']}/", headers=csrf_header, timeout=10
        )
        assert released.status_code == 204
        second = browser.post(
            f"{base}/api/v1/claims/", json={**body, "name": "b"}, headers=csrf_header, timeout=10
        )
        assert second.status_code == 201 and second.json()["status"] == "allocated", second.text

        sharing_scenarios(browser, base, clusters[0]["id"], csrf_header)

        live_telemetry(browser, base)

        page = browser.get(f"{base}/clusters/{clusters[0]['id']}/", timeout=10)
        assert page.status_code == 200 and "training-h100" in page.text
        assert browser.get(f"{base}/static/frontend/live.js", timeout=10).status_code == 200


def sharing_scenarios(browser: requests.Session, base: str, cluster: int, headers: dict) -> None:
    """What users bring first, through the REST API on a fresh database: one A10 (time-slicing) holding a
    training job (8Gi, 70%) and three inference services (2Gi, 20%) at once; seven 10Gi + 10% inference
    claims on one A100 80GB (MPS)."""

    def post(path: str, body: dict) -> dict:
        response = browser.post(f"{base}/api/v1/{path}", json=body, headers=headers, timeout=10)
        assert response.status_code == 201, response.text
        return response.json()

    def one_gpu_pool(name: str, model: str, mode: str) -> dict:
        return post(
            "node-pools/",
            {
                "cluster": cluster,
                "name": name,
                "gpu_model": model,
                "gpus_per_node": 1,
                "node_count": 1,
                "max_nodes": 1,
                "driver_release": "580.105.08",
                "sharing_mode": mode,
            },
        )

    a10 = one_gpu_pool("a10-shared", "a10", "time-slicing")
    assert (a10["compute_oversubscription_percent"], a10["default_guaranteed_percent"]) == (200, 10)
    asks = [("train", "8Gi", 70)] + [(f"infer-{i}", "2Gi", 20) for i in range(3)]
    placed = [
        post(
            "claims/",
            {
                "cluster": cluster,
                "pool": a10["id"],
                "name": name,
                "kind": "fraction",
                "gpu_memory": memory,
                "compute_percent": compute,
            },
        )
        for name, memory, compute in asks
    ]
    assert [c["status"] for c in placed] == ["allocated"] * 4, [c["pending_reason"] for c in placed]
    assert len({c["allocation"]["gpus"][0]["gpu_uuid"] for c in placed}) == 1  # all on the one card
    assert [c["gpu_util_display"] for c in placed] == ["10%/70%"] + ["10%/20%"] * 3
    assert "nothing holds its memory" in placed[0]["allocation"]["isolation_detail"]
    node = browser.get(f"{base}/api/v1/nodes/{placed[0]['allocation']['node']}/", timeout=10).json()
    (gpu,) = node["gpus"]
    assert (
        gpu["memory_allocated_mib"],
        gpu["compute_allocated_percent"],
        gpu["compute_ceilings_percent"],
    ) == (
        14 * 1024,
        40.0,
        130.0,
    )

    a100 = one_gpu_pool("a100-mps", "a100-sxm4-80gb", "mps")
    seven = [
        post(
            "claims/",
            {
                "cluster": cluster,
                "pool": a100["id"],
                "name": f"llm-{i}",
                "kind": "fraction",
                "gpu_memory": "10Gi",
                "compute_percent": 10,
            },
        )
        for i in range(7)
    ]
    assert [c["status"] for c in seven] == ["allocated"] * 7
    assert all(c["allocation"]["isolation"] == "memory-capped" for c in seven)

    # Metered from the allocations (SQLite writes them through the ORM): both pools, their claims.
    usage = browser.get(f"{base}/api/v1/usage/", params={"group_by": "pool"}, timeout=10).json()["results"]
    claims_by_pool = {row["key"]: row["claims"] for row in usage}
    assert claims_by_pool["demo/a10-shared"] == 4 and claims_by_pool["demo/a100-mps"] == 7


def live_telemetry(browser: requests.Session, base: str) -> None:
    """No Redis and no simulator process, yet the dashboard's stream is live: the server's own thread
    samples the simulated GPUs every second into its in-process store, and the stream sends them."""
    with connect(
        base.replace("http", "ws") + "/ws/telemetry/",
        additional_headers={"Cookie": f"sessionid={browser.cookies['sessionid']}", "Origin": base},
        open_timeout=10,
    ) as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["type"] == "telemetry.hello" and hello["gpus"]
        gpus = {g["id"] for g in hello["gpus"]}
        frame = {}
        while frame.get("type") != "telemetry.frame":
            frame = json.loads(ws.recv(timeout=10))  # a sample a second: a frame well within this
    util = frame["columns"].index("util")
    assert frame["gpus"] and {row[0] for row in frame["gpus"]} <= gpus
    assert all(0 <= row[util] <= 100 for row in frame["gpus"])
    listed = browser.get(f"{base}/api/v1/telemetry/gpus/", timeout=10).json()["results"]
    assert any(g["latest"] is not None for g in listed)
