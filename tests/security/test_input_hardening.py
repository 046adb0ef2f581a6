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


def test_the_api_takes_json_bodies_only(api):
    """Form and multipart bodies are 415 in the error shape (an empty multipart body was a 400 with no
    body); nothing is written."""
    for body, content_type in [
        (b"--x--\r\n", "multipart/form-data; boundary=x"),
        (b"name=ci", "application/x-www-form-urlencoded"),
    ]:
        response = api.generic("POST", "/api/v1/tokens/", body, content_type=content_type)
        assert (response.status_code, response.json()["code"]) == (415, "unsupported_media_type")
    assert not ApiToken.objects.exists()


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


def test_a_body_over_the_limit_is_a_json_413_naming_the_limit(api, settings):
    """Django refuses a body over DATA_UPLOAD_MAX_MEMORY_SIZE; under /api/ that was its HTML 400 page."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = '{"name": "' + "a" * limit + '"}'
    response = api.generic("POST", "/api/v1/tokens/", body, content_type="application/json")
    assert (response.status_code, response["Content-Type"]) == (413, "application/json")
    assert response.json()["code"] == "too_large"
    assert response.json()["details"] == {"limit_bytes": limit}
    assert not ApiToken.objects.exists()
    # Django's other refusals before a view (here a Host that is no host name) are JSON under /api/ too.
    refused = api.get("/api/v1/me/", HTTP_HOST="no host!")
    assert (refused.status_code, refused.json()["code"]) == (400, "bad_request")


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


def test_unmatched_api_urls_are_json_404s(api):
    """`node-pools/abc/…` matches no route (its id is `<int:pk>`): Django's HTML page answered."""
    for url in ("/api/v1/node-pools/abc/driver-options/", "/api/v1/no-such-thing/"):
        response = api.get(url)
        assert response.status_code == 404 and response["Content-Type"] == "application/json"
        assert response.json()["code"] == "not_found"
    assert "text/html" in api.get("/no-such-page/")["Content-Type"]  # the UI keeps its page


@pytest.mark.parametrize(
    ("url", "params", "field"),
    [
        ("/api/v1/clusters/", {"page_size": "null"}, "page_size"),
        ("/api/v1/clusters/", {"page_size": "0"}, "page_size"),
        ("/api/v1/upgrades/", {"page": ""}, "page"),
        ("/api/v1/upgrades/", {"page": "0"}, "page"),
        ("/api/v1/audit/", {"until": ""}, "until"),
        ("/api/v1/usage/", {"until": ""}, "until"),
        ("/api/v1/claims/", {"pool": "0.5"}, "pool"),
        ("/api/v1/driver-releases/", {"enabled": "null"}, "enabled"),
        ("/api/v1/driver-releases/", {"branch": "0.5"}, "branch"),
        ("/api/v1/nodes/", {"cordoned": "maybe"}, "cordoned"),
    ],
)
def test_query_parameters_the_schema_calls_invalid_are_400_naming_them(api, url, params, field):
    response = api.get(url, params)
    assert response.status_code == 400, response.content
    assert field in response.json()["details"]["fields"]


def test_query_parameters_the_schema_calls_valid_are_taken(api):
    """An id of nothing (any whole number) filters to nothing instead of a 400 'not a valid choice'."""
    for url, params in [
        ("/api/v1/audit/", {"actor_user": "0"}),
        ("/api/v1/upgrades/", {"pool": "-5"}),
        ("/api/v1/telemetry/events/", {"cluster": str(10**30)}),
        ("/api/v1/nodes/", {"cordoned": "false"}),
        ("/api/v1/audit/", {"object_type": ""}),  # free text may be empty
    ]:
        response = api.get(url, params)
        assert response.status_code == 200, (url, response.content)


def test_a_parameter_given_twice_is_400(api):
    response = api.get("/api/v1/clusters/?page=1&page=2")
    assert (response.status_code, response.json()["details"]["fields"]["page"][0]["code"]) == (
        400,
        "repeated",
    )


def test_string_fields_take_strings_only(api):
    response = api.post("/api/v1/invitations/", {"username": 0, "role": "viewer"})
    assert response.status_code == 400 and "username" in response.data["details"]["fields"]


@pytest.mark.parametrize("value", [0, 1, "yes", "true", None])
def test_boolean_fields_take_true_or_false_only(api, owner, make_cluster, value):
    cluster = make_cluster(owner.memberships.get().tenant)
    body = {"cluster": cluster.pk, "name": "c", "kind": "whole", "training": value}
    response = api.post("/api/v1/claims/", body, format="json")
    assert response.status_code == 400 and "training" in response.data["details"]["fields"]
    assert api.post("/api/v1/claims/", {**body, "training": True}, format="json").status_code == 201


def test_options_answers_every_route(api, owner, make_cluster):
    cluster = make_cluster(owner.memberships.get().tenant)
    for url in (f"/api/v1/clusters/{cluster.pk}/agent-manifest/", f"/api/v1/clusters/{cluster.pk}/defrag/"):
        assert api.options(url).status_code == 200  # DRF's metadata needed a serializer: 500


def test_a_patch_naming_nothing_changes_nothing(api, owner):
    membership = owner.memberships.get()
    response = api.patch(f"/api/v1/members/{membership.pk}/", {})
    assert response.status_code == 200 and response.data["role"] == "owner"
