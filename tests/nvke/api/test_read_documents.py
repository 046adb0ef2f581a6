"""Clusters and node pools are written out by hand for speed (their serializers' `to_representation`),
and nodes and telemetry GPUs are encoded by msgspec from their declared fields (nvke/api/documents.py):
the list and the detail must be the document DRF's walk over the declared fields gave (for nodes: the
models' values in the declared fields, rendered by DRF), byte for byte, for objects of every shape — an
attached cluster without version or region and with what it observed, add-ons, pools of each sharing
mode with a MIG layout and a node selector, nodes with labels and failed preflight checks, GPUs with
shares and with a latest sample."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from claims.allocator import create_claim, release_claim
from claims.models import Claim
from clusters.api.serializers import ClusterSerializer
from clusters.api.views import ClusterViewSet
from clusters.models import Cluster, ClusterAddon
from nodepools import preflight
from nodepools.api import documents as node_documents
from nodepools.api.serializers import NodePoolSerializer, NodeSerializer
from nodepools.api.views import NodePoolViewSet
from nodepools.models import Gpu, Node, NodePool
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext
from telemetry.api.serializers import GpuTelemetrySerializer
from tests.nodepools.expected_documents import expected_gpu

pytestmark = pytest.mark.django_db


def walked(serializer: serializers.ModelSerializer, instance) -> str:
    """The reference: DRF's own walk over the serializer's fields."""
    return render(serializers.ModelSerializer.to_representation(serializer, instance))


def render(data: dict) -> str:
    return JSONRenderer().render(data).decode()  # keys in order, 10.0 is not 10


@pytest.fixture
def fleet(owner, make_cluster, make_pool):
    tenant = owner.memberships.get().tenant
    prod = make_cluster(tenant, "prod")
    attached = make_cluster(tenant, "edge")
    Cluster.objects.filter(pk=attached.pk).update(
        attached=True,
        control_plane_nodes=0,
        kubernetes_version=None,
        region=None,
        endpoint="https://edge.example:6443",
        observed={"version": "v1.34.2", "gpu_nodes": 2, "features": ["dra"]},
        conditions=[{"type": "Reachable", "status": "True", "reason": "Ok", "message": "é \u2028"}],
    )
    ClusterAddon.objects.get_or_create(cluster=prod, name="gpu-operator", defaults={"version": "v25.3.0"})
    pools = [
        make_pool(prod, name="whole", gpu_model="h100-sxm5-80gb", nodes=2, gpus_per_node=8),
        make_pool(
            prod,
            name="mig",
            gpu_model="h100-sxm5-80gb",
            nodes=1,
            gpus_per_node=8,
            sharing_mode="mig",
            mig_layout=["3g.40gb", "2g.20gb", "1g.10gb"],
        ),
        make_pool(
            prod,
            name="frac",
            gpu_model="l4",
            nodes=2,
            sharing_mode="fractional",
            node_selector={"zone": "a", "tier": ""},
            autoscaling=True,
            status_reason="Scaling",
            status_message="Adding a node.",
        ),
    ]
    for pool in pools:
        reconcile(pool.pk)
    Node.objects.filter(pool=pools[2]).update(labels={"nvidia.com/gpu.product": "NVIDIA-L4", "x": "1"})
    # What JSON escapes, and what DRF's renderer does besides (U+2028, U+2029): the nodes' documents are
    # written as JSON text by hand.
    Node.objects.filter(pk=Node.objects.filter(pool=pools[0]).order_by("pk").first().pk).update(
        labels={'say "hi"\\': "tab\tnl\n\u2028\u2029 é ✓ \x01", "n": 1.5, "e": 1e16, "list": [None, True]}
    )
    Node.objects.filter(pool=pools[1]).update(
        preflight={"mig_current": False, "mig_pending": True, "nvml_memory": False}
    )
    context = TenantContext(tenant, "owner")
    for name, fields in [
        ("w", {"kind": "whole", "gpus": 2}),
        ("m", {"kind": "mig", "mig_profile": "1g.10gb"}),
        ("f", {"kind": "fraction", "gpu_memory_mib": 2048, "compute_percent": 60, "guaranteed_percent": 30}),
    ]:
        create_claim(context=context, cluster=prod, name=name, namespace="ml", **fields)
    return tenant


def read(api, url: str) -> list[dict]:
    """The list's documents, then each one's detail."""
    listed = json.loads(api.get(url, {"page_size": 500}).content)["results"]
    assert listed
    details = [json.loads(api.get(f"{url}{item['id']}/").content) for item in listed]
    assert [d["id"] for d in details] == [item["id"] for item in listed]
    return listed + details


def test_clusters_are_drfs_walk(fleet, owner, client_for):
    documents = read(client_for(owner, token=True), "/api/v1/clusters/")
    clusters = {c.pk: c for c in ClusterViewSet.queryset.filter(tenant=fleet)}
    assert {d["attached"] for d in documents} == {True, False} and any(d["addons"] for d in documents)
    for document in documents:
        assert render(document) == walked(ClusterSerializer(), clusters[document["id"]]), document["name"]


def test_node_pools_are_drfs_walk(fleet, owner, client_for):
    documents = read(client_for(owner, token=True), "/api/v1/node-pools/")
    pools = {p.pk: p for p in NodePoolViewSet.queryset.filter(tenant=fleet)}
    assert {d["sharing_mode"] for d in documents} == {"exclusive", "mig", "fractional"}
    for document in documents:
        assert render(document) == walked(NodePoolSerializer(), pools[document["id"]]), document["name"]


def expected_node(node: Node) -> dict:
    """A node's document from its model rows, in the fields NodeSerializer declares (the fields as the
    reference for the order: tests/nodepools/test_node_snapshot.py checks the GPUs' and shares')."""
    document = {
        "id": node.pk,
        "name": node.name,
        "cluster": node.pool.cluster_id,
        "pool": node.pool_id,
        "status": node.status,
        "cordoned": node.cordoned,
        "driver_version": node.driver_version,
        "cpu_millicores": node.cpu_millicores,
        "memory_mib": node.memory_mib,
        "labels": node.labels,
        "preflight": node.preflight,
        "preflight_failures": preflight.failures(node, node.pool),
        "gpus": [expected_gpu(gpu) for gpu in node.gpus.order_by("index")],
        "created_at": node.created_at.isoformat().replace("+00:00", "Z"),
    }
    assert list(document) == list(NodeSerializer().fields)
    return document


def test_nodes_are_the_models_rendered_by_drf(fleet, owner, client_for):
    documents = read(client_for(owner, token=True), "/api/v1/nodes/")
    nodes = {n.pk: n for n in Node.objects.select_related("pool").filter(tenant=fleet)}
    assert any(d["preflight_failures"] for d in documents) and any(d["labels"] for d in documents)
    assert any(share for d in documents for gpu in d["gpus"] for share in gpu["shares"])
    for document in documents:
        assert render(document) == render(expected_node(nodes[document["id"]])), document["name"]
    # The bodies themselves, as they are encoded (not parsed and rendered again).
    api = client_for(owner, token=True)
    listed = api.get("/api/v1/nodes/", {"page_size": 500})
    ids = [document["id"] for document in json.loads(listed.content)["results"]]
    page = [expected_node(nodes[pk]) for pk in ids]
    assert listed.content.decode() == render(
        {"count": len(ids), "next": None, "previous": None, "results": page}
    )
    assert "\\u2028" in listed.content.decode() and "\u2028" not in listed.content.decode()
    for pk, document in zip(ids, page, strict=True):
        assert api.get(f"/api/v1/nodes/{pk}/").content.decode() == render(document)


def test_nodes_indented_or_browsed_are_the_same_documents(fleet, owner, client_for):
    """The documents encoded before rendering, asked for indented or in the browsable API: parsed and
    rendered by DRF, the same values."""
    api = client_for(owner, token=True)
    node = Node.objects.filter(tenant=fleet).order_by("pk").first()
    for url in ("/api/v1/nodes/", f"/api/v1/nodes/{node.pk}/"):
        compact = api.get(url)
        indented = api.get(url, HTTP_ACCEPT="application/json; indent=2")
        assert b"\n  " in indented.content and b"\n" not in compact.content
        assert json.loads(indented.content) == json.loads(compact.content) == compact.data
        browsed = api.get(url, HTTP_ACCEPT="text/html")
        assert browsed.status_code == 200 and node.name in browsed.content.decode()


def test_telemetry_gpus_are_drfs_walk(fleet, owner, client_for, monkeypatch):
    sampled = Gpu.objects.filter(tenant=fleet).order_by("pk").first().pk
    # 1e-05: json.dumps' spelling (msgspec writes 1e-5), kept as DRF writes it.
    latest = {sampled: {"ts": 1764806400.5, "util": 41.0, "mem_mib": 2048, "power_w": 1e-05, "xid": None}}
    monkeypatch.setattr(
        "telemetry.api.views.dict_latest", lambda gpus: {g.pk: latest[g.pk] for g in gpus if g.pk in latest}
    )
    documents = read(client_for(owner, token=True), "/api/v1/telemetry/gpus/")
    gpus = {g.pk: g for g in Gpu.objects.select_related("node__pool").filter(tenant=fleet)}
    assert {d["latest"] is None for d in documents} == {True, False}
    for document in documents:
        reference = GpuTelemetrySerializer(context={"latest": latest})
        assert render(document) == walked(reference, gpus[document["id"]]), document["id"]
    # The bodies themselves, as they are encoded (not parsed and rendered again).
    api = client_for(owner, token=True)
    for pk in (sampled, min(set(gpus) - {sampled})):
        reference = GpuTelemetrySerializer(context={"latest": latest})
        assert api.get(f"/api/v1/telemetry/gpus/{pk}/").content.decode() == walked(reference, gpus[pk])
    assert b"1e-05" in api.get(f"/api/v1/telemetry/gpus/{sampled}/").content


def test_a_pool_written_answers_drfs_walk_and_refuses_another_tenants_cluster(
    fleet, owner, client_for, make_member, make_cluster
):
    api = client_for(owner, token=True)
    pool = NodePool.objects.get(name="whole")
    response = api.patch(f"/api/v1/node-pools/{pool.pk}/", {"min_nodes": 1}, format="json")
    assert response.status_code == 200, response.data
    assert render(json.loads(response.content)) == walked(
        NodePoolSerializer(), NodePool.objects.get(pk=pool.pk)
    )
    other = make_cluster(make_member("other", "owner").memberships.get().tenant, "theirs")
    body = {"cluster": other.pk, "name": "x", "gpu_model": "l4", "gpus_per_node": 1, "node_count": 1}
    body |= {"max_nodes": 1, "driver_release": "580.105.08"}
    response = api.post("/api/v1/node-pools/", body, format="json")
    assert response.status_code == 400, response.data
    assert response.data["details"]["fields"]["cluster"][0]["code"] == "does_not_exist"


def test_a_page_read_again_looks_up_only_the_claims_it_has_not_seen(fleet, owner, client_for):
    """Each web process keeps what a share says of its claim (nodepools/api/documents.py): a page
    read again costs one query less and is the same document; a claim placed since is looked up."""
    api = client_for(owner, token=True)
    api.get("/api/v1/clusters/")  # the token's use of the minute is recorded
    node_documents._claims_seen.clear()

    def read_nodes() -> tuple[int, bytes]:
        with CaptureQueriesContext(connection) as captured:
            response = api.get("/api/v1/nodes/", {"page_size": 500})
        assert response.status_code == 200
        return len(captured.captured_queries), response.content

    (first, body), (again, same) = read_nodes(), read_nodes()
    assert same == body and again == first - 1
    prod = Cluster.objects.get(tenant=fleet, name="prod")
    create_claim(context=TenantContext(fleet, "owner"), cluster=prod, name="new", kind="whole", gpus=1)
    placed, changed = read_nodes()
    assert placed == first and b'"name":"new"' in changed and b'"name":"new"' not in body


def test_a_claim_released_before_its_share_is_written_is_left_out(fleet):
    claim = Claim.objects.get(name="w")
    allocation = claim.allocation.pk
    node_documents._claims_seen.clear()
    release_claim(claim)
    assert node_documents._claims_of({allocation}) == {}
