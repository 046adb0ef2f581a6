"""Smoke test of the embedded default: `scripts/dev serve` with no DATABASE_URL or REDIS_URL (SQLite,
in-process tasks, in-memory channel layer) starts, seeds the demo tenant and serves the API and pages."""

import re

import pytest
import requests

from .processes import BIN, ROOT, Process, free_port, port_open, process_env

pytestmark = pytest.mark.integration


def test_embedded_default_serves_api_and_pages(tmp_path):
    port = free_port()
    env = process_env(
        DATABASE_URL=None,
        REDIS_URL=None,
        NVKE_DATA_DIR=str(tmp_path),
        PORT=str(port),
        PATH=f"{BIN}:/usr/bin:/bin",
        DJANGO_SETTINGS_MODULE=None,
    )
    server = Process([str(ROOT / "scripts" / "dev"), "serve"], env)
    try:
        server.wait_for(lambda: port_open(port), "the embedded server to listen", timeout_s=120)
        assert f"http://127.0.0.1:{port}/" in server.log and "demo / nvke-demo" in server.log
        assert (tmp_path / "nvke.sqlite3").exists()

        base = f"http://127.0.0.1:{port}"
        browser = requests.Session()
        login_page = browser.get(f"{base}/login/", timeout=10)
        assert login_page.status_code == 200
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text).group(1)
        signed_in = browser.post(
            f"{base}/login/",
            data={"username": "demo", "password": "nvke-demo", "csrfmiddlewaretoken": csrf},
            headers={"Referer": f"{base}/login/"},
            timeout=10,
        )
        assert signed_in.status_code == 200 and signed_in.url == f"{base}/"

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

        page = browser.get(f"{base}/clusters/{clusters[0]['id']}/", timeout=10)
        assert page.status_code == 200 and "training-h100" in page.text
        assert browser.get(f"{base}/static/frontend/live.js", timeout=10).status_code == 200
    finally:
        server.stop()
