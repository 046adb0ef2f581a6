"""A claim says the isolation its node enforces: a fraction a pod asked NVKE's scheduler for is `none` on
its page and in the API until the node's agent reports NVKE's device plugin registered (and, on an MPS
pool, its MPS daemons up); then what its pool's mode holds."""

import pytest
from django.test import Client

from claims.models import Claim
from nodepools.nodes import record_preflight
from nodepools.services import reconcile

pytestmark = pytest.mark.django_db


@pytest.fixture
def mps_claim(api, owner, make_cluster):
    """A fraction on an MPS pool, as NVKE records one its scheduler placed for a pod."""
    cluster = make_cluster(owner.memberships.get().tenant, "prod")
    body = {
        "cluster": cluster.pk,
        "name": "mps",
        "gpu_model": "a10",
        "gpus_per_node": 1,
        "node_count": 1,
        "max_nodes": 1,
        "driver_release": "580.105.08",
        "sharing_mode": "mps",
    }
    pool = api.post("/api/v1/node-pools/", body, format="json").data
    reconcile(pool["id"])
    fraction = {"cluster": cluster.pk, "pool": pool["id"], "name": "serve", "kind": "fraction"}
    created = api.post(
        "/api/v1/claims/", {**fraction, "gpu_memory": "6Gi", "compute_percent": 40}, format="json"
    )
    assert created.status_code == 201, created.data
    claim = Claim.objects.get(pk=created.data["id"])
    assert claim.allocation.isolation == "memory-capped", "the allocator records what MPS would hold"
    Claim.objects.filter(pk=claim.pk).update(source="pod")
    return claim


def said(api, owner, claim) -> tuple[str, str, str]:
    """The isolation and its words in the API, and the claim's page (its isolation line)."""
    allocation = api.get(f"/api/v1/claims/{claim.pk}/").json()["allocation"]
    html = ui(owner).get(f"/claims/{claim.pk}/").content.decode()
    return allocation["isolation"], allocation["isolation_detail"], html


def ui(owner) -> Client:
    page = Client()
    page.force_login(owner)
    return page


def listed(owner, claim) -> str:
    """The isolation cell of the claim's row in its cluster's claim list."""
    html = ui(owner).get(f"/clusters/{claim.cluster_id}/claims/").content.decode()
    row = html.split(f'data-claim-row="{claim.pk}"', 1)[1].split("</tr>", 1)[0]
    return row.rsplit("<td>", 1)[1].split("</td>", 1)[0]


def test_a_scheduler_path_fraction_is_none_until_the_device_plugin_and_mps_daemons_are_up(
    api, owner, mps_claim
):
    isolation, detail, html = said(api, owner, mps_claim)
    assert isolation == "none"
    assert "NVKE's device plugin" in detail and "no GPU memory or compute limit" in detail
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in detail
    assert 'class="isolation isolation-none"' in html and "no GPU memory or compute limit" in html
    assert listed(owner, mps_claim) == "none"

    node = mps_claim.allocation.node
    record_preflight(node.pk, {"device_plugin": True})  # the plugin, no MPS daemon yet
    assert said(api, owner, mps_claim)[0] == "none"

    record_preflight(node.pk, {"mps_daemon": True})
    isolation, detail, html = said(api, owner, mps_claim)
    assert isolation == "memory-capped"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in detail
    assert 'class="isolation isolation-memory-capped"' in html
    assert listed(owner, mps_claim) == "memory-capped"


def test_a_claim_made_through_the_api_says_what_its_allocation_holds(api, owner, mps_claim):
    Claim.objects.filter(pk=mps_claim.pk).update(source="api")
    assert said(api, owner, mps_claim)[0] == "memory-capped", "no pod, no device plugin in its way"
