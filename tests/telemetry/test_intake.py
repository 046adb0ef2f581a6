"""The agents' ingestion route as a real server serves it (telemetry/intake.py, ahead of Django):
batches stored and answered 202, refusals naming the field with nothing stored, the counters in
/metrics, and 503 with Retry-After when the process is overloaded."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from nodepools.models import Gpu, Node
from telemetry import store
from telemetry.models import NodeToken

from .conftest import sample

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
METRICS_TOKEN = "scrape-me"


def post(server, raw_token: str, samples: list[dict], **headers) -> requests.Response:
    return requests.post(
        f"{server.url}/api/v1/telemetry/ingest/",
        json={"samples": samples},
        headers={"Authorization": f"Node {raw_token}", **headers},
        timeout=30,
    )


def counters(server) -> dict[str, float]:
    text = requests.get(
        f"{server.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30
    ).text
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("nvke_telemetry_ingest_")
    }


@pytest.mark.parametrize("server", ["daphne", "uvicorn"])
def test_batches_from_many_nodes_at_once_are_stored_and_counted(server, serve_asgi, frac_pool, clean_redis):
    web = serve_asgi(server, NVKE_METRICS_TOKEN=METRICS_TOKEN)
    nodes = list(Node.objects.filter(pool=frac_pool))
    tokens = {node.pk: NodeToken.issue(node)[1] for node in nodes}
    now = time.time()
    batches = {  # built here: the threads below touch no database
        node.pk: [sample(first, now, util=61), sample(second, now - 30)]
        for node in nodes
        for first, second in [list(node.gpus.order_by("index"))]
    }

    def report(node: Node) -> requests.Response:
        return post(web, tokens[node.pk], batches[node.pk])

    with ThreadPoolExecutor(len(nodes) * 4) as pool:
        answers = list(pool.map(report, nodes * 4))  # every node four times, all at once
    assert [(a.status_code, a.json()) for a in answers] == [(202, {"accepted": 2})] * len(answers)
    gpus = list(Gpu.objects.filter(node__in=nodes))
    latest = store.latest([g.pk for g in gpus])
    assert sorted(round(v["util"]) for v in latest.values()) == [50, 50, 61, 61]
    assert set(store.heartbeats()) == {node.pk for node in nodes}
    figures = counters(web)
    assert figures['nvke_telemetry_ingest_samples_total{outcome="accepted"}'] == 2 * len(answers)
    assert figures['nvke_telemetry_ingest_samples_total{outcome="late"}'] == len(answers)  # the -30 s ones
    assert figures['nvke_telemetry_ingest_samples_total{outcome="rejected"}'] == 0


def test_a_refused_batch_names_the_field_and_stores_nothing(serve_asgi, node, clean_redis):
    web = serve_asgi(NVKE_METRICS_TOKEN=METRICS_TOKEN)
    _, raw = NodeToken.issue(node)
    foreign = Gpu.objects.exclude(node=node).first()
    refused = post(web, raw, [sample(node.gpus.first()), sample(foreign)])
    assert refused.status_code == 400
    assert refused.json()["code"] == "unknown_gpu" and refused.json()["details"]["field"] == "samples[1].gpu"
    assert post(web, "nvkenode_wrong", [sample(node.gpus.first())]).status_code == 401
    garbled = requests.post(
        f"{web.url}/api/v1/telemetry/ingest/",
        data=b"{nope",
        headers={"Authorization": f"Node {raw}"},
        timeout=30,
    )
    assert garbled.status_code == 400 and garbled.json()["details"]["field"] == "body"
    stranger = post(web, raw, [sample(node.gpus.first())], Host="evil.example")
    assert stranger.status_code == 400 and stranger.json()["code"] == "disallowed_host"
    assert [key for key in clean_redis.keys() if key != b"tm:ingest"] == []
    figures = counters(web)
    assert (
        figures['nvke_telemetry_ingest_samples_total{outcome="rejected"}'] == 3
    )  # the stranger's body is not read
    assert figures['nvke_telemetry_ingest_batches_rejected_total{reason="invalid"}'] == 3
    assert figures['nvke_telemetry_ingest_batches_rejected_total{reason="unauthorized"}'] == 1


def test_an_overloaded_process_answers_503_with_retry_after(serve_asgi, node, clean_redis):
    web = serve_asgi(NVKE_TELEMETRY_INGEST_MAX_PENDING="0", NVKE_METRICS_TOKEN=METRICS_TOKEN)
    _, raw = NodeToken.issue(node)
    busy = post(web, raw, [sample(g) for g in node.gpus.all()])
    assert busy.status_code == 503 and busy.json()["code"] == "ingest_overloaded"
    assert 1 <= int(busy.headers["Retry-After"]) <= 3
    assert store.latest([g.pk for g in node.gpus.all()]) == {}
    assert counters(web)['nvke_telemetry_ingest_batches_rejected_total{reason="overloaded"}'] == 1
