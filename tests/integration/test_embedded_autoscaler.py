"""The pool autoscaler in the embedded default (`scripts/dev serve`: SQLite, tasks in process, no beat):
a claim the demo's L4 pool cannot hold grows it, and once released the idle node goes, its steps on the
process's one scheduler, which plays beat's schedule."""

import time

import pytest

from .processes import demo_session, embedded_server

pytestmark = pytest.mark.integration


def test_the_embedded_default_grows_and_shrinks_an_autoscaling_pool(tmp_path):
    with embedded_server(tmp_path, NVKE_AUTOSCALER_INTERVAL_S="0.5") as (server, base):
        browser = demo_session(base)
        headers = {"X-CSRFToken": browser.cookies["csrftoken"], "Referer": f"{base}/"}
        pools = browser.get(f"{base}/api/v1/node-pools/", timeout=10).json()["results"]
        l4 = next(p for p in pools if p["name"] == "inference-l4")  # 2 nodes of 4 L4s, fractional
        changed = browser.patch(
            f"{base}/api/v1/node-pools/{l4['id']}/",
            json={"autoscaling": True, "scale_down_delay_s": 1},
            headers=headers,
            timeout=10,
        )
        assert changed.status_code == 200, changed.text
        # The demo's own fractions on the pool go first: its two nodes are then free for whole claims.
        fractions = f"{base}/api/v1/claims/?cluster={l4['cluster']}&kind=fraction"  # on the L4s only
        demo = browser.get(fractions, timeout=10).json()["results"]
        assert demo
        for claim in demo:
            gone = browser.delete(f"{base}/api/v1/claims/{claim['id']}/", headers=headers, timeout=10)
            assert gone.status_code == 204

        def claim(name: str) -> dict:
            body = {"cluster": l4["cluster"], "pool": l4["id"], "kind": "whole", "gpus": 4, "name": name}
            response = browser.post(f"{base}/api/v1/claims/", json=body, headers=headers, timeout=10)
            assert response.status_code == 201, response.text
            return response.json()

        held = [claim("a"), claim("b")]  # the two nodes, whole
        extra = claim("c")  # a third node for it, at once, in process
        assert [c["status"] for c in held] == ["allocated", "allocated"]
        status = browser.get(f"{base}/api/v1/claims/{extra['id']}/", timeout=10).json()["status"]
        assert status == "allocated"
        assert browser.get(f"{base}/api/v1/node-pools/{l4['id']}/", timeout=10).json()["node_count"] == 3

        for made in (*held, extra):
            browser.delete(f"{base}/api/v1/claims/{made['id']}/", headers=headers, timeout=10)
        deadline = time.monotonic() + 60
        while browser.get(f"{base}/api/v1/node-pools/{l4['id']}/", timeout=10).json()["node_count"] > 1:
            assert time.monotonic() < deadline, server.log[-4000:]
            time.sleep(0.5)  # one node at a time, down to min_nodes 1, with no beat running
        reasons = [
            d["reason"]
            for d in browser.get(f"{base}/api/v1/node-pools/{l4['id']}/autoscaling/", timeout=10).json()[
                "decisions"
            ]
        ]
        assert reasons.count("NodeDrained") == 2 and "PendingClaims" in reasons
