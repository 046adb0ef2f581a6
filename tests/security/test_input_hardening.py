"""Inputs the fuzzer found turning into server errors, kept as plain regression tests."""

import pytest

from nvke.api.parsers import MAX_DEPTH
from nvke.tenancy.models import ApiToken

from .test_isolation_matrix import ws_outcome

pytestmark = pytest.mark.django_db


def test_nul_characters_in_a_json_body_are_400_naming_the_field(api, catalog):
    response = api.post(
        "/api/v1/clusters/",
        {"name": "prod", "kubernetes_version": "1.35\x00", "region": "us-east-1", "control_plane_nodes": 1},
    )
    assert response.status_code == 400
    assert response.data["message"] == "kubernetes_version: Null characters are not allowed."
    nested = api.post(
        "/api/v1/claims/", {"cluster": 1, "name": "c", "kind": "whole", "allowed_models": ["a\x00"]}
    )
    assert nested.status_code == 400 and nested.data["message"].startswith("allowed_models[0]:")


def test_nul_characters_in_query_parameters_are_400(api):
    response = api.get("/api/v1/driver-releases/", {"branch_type": "pb\x00"})
    assert response.status_code == 400
    assert response.json()["message"] == "branch_type: Null characters are not allowed."


def test_form_posts_with_nul_characters_are_400(api):
    response = api.post("/api/v1/tokens/", {"name": "ci\x00"}, format="multipart")
    assert response.status_code == 400 and response.data["message"].startswith("name:")


def test_audit_time_filters_take_any_iso_offset(api):
    assert api.get("/api/v1/audit/", {"since": "0512-04-18T11:46:05+23:16"}).status_code == 200
    response = api.get("/api/v1/audit/", {"until": "0001-01-01T00:00:00+01:00"})
    assert response.status_code == 400 and response.data["message"].startswith("until:")


def test_a_deeply_nested_body_is_400_not_a_recursion_error(api):
    """2 KB of nested arrays ran the JSON decoder out of stack (a 500); any body nested past MAX_DEPTH
    is a 400 before anything walks it, and nothing is written."""
    for depth in (1000, MAX_DEPTH + 1):
        body = "[" * depth + "]" * depth
        response = api.generic("POST", "/api/v1/tokens/", body, content_type="application/json")
        assert (response.status_code, response.data["code"]) == (400, "parse_error"), depth
        assert "deep" in response.data["message"]
    nested: dict = {"name": "ci"}
    for _ in range(MAX_DEPTH):
        nested = {"name": "ci", "x": nested}
    assert api.post("/api/v1/tokens/", nested).status_code == 400
    assert not ApiToken.objects.exists()
    # Within the limit the body is taken as before.
    assert api.post("/api/v1/tokens/", {"name": "ci", "x": [[["ok"]]]}).status_code == 201


@pytest.mark.parametrize(
    "url", ["/api/v1/gpu-models/l4/drivers/", "/api/v1/node-pools/{pool}/driver-options/"]
)
def test_a_cuda_version_that_is_no_version_is_400_naming_cuda(api, owner, make_cluster, make_pool, url):
    pool = make_pool(make_cluster(owner.memberships.get().tenant))
    response = api.get(url.format(pool=pool.pk), {"cuda": "12.x"})
    assert (response.status_code, response.data["code"], response.data["details"]["field"]) == (
        400,
        "invalid_version",
        "cuda",
    )


def test_gpu_model_drivers_apply_the_cuda_rule_as_driver_options_do(api, owner, make_cluster, make_pool):
    pool = make_pool(make_cluster(owner.memberships.get().tenant))
    catalog_rows = api.get("/api/v1/gpu-models/l4/drivers/", {"cuda": "13.0"}).data
    pool_rows = api.get(f"/api/v1/node-pools/{pool.pk}/driver-options/", {"cuda": "13.0"}).data

    def cuda_refused(rows) -> set[str]:
        return {
            r["driver"]["version"] for r in rows if any(x["rule"] == "cuda_minimum" for x in r["refusals"])
        }

    assert cuda_refused(catalog_rows) and cuda_refused(catalog_rows) == cuda_refused(pool_rows)
    bad = api.get("/api/v1/gpu-models/l4/drivers/", {"sharing_mode": "bogus"})
    assert (bad.status_code, bad.data["details"]["field"]) == (400, "sharing_mode")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/events/", "/ws/telemetry/"])
@pytest.mark.parametrize("value", ["%C2%B2", "%D9%A3", "99999999999999999999999", "-1", "1.0"])
def test_websocket_ids_that_are_no_ids_are_refused_not_a_crash(owner, path, value):
    """'²'.isdigit() is true and int('²') raises: the handshake crashed; now it is refused with 4403."""
    assert ws_outcome(f"{path}?cluster={value}", owner) == "closed 4403"
