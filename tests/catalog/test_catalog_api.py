import pytest

pytestmark = pytest.mark.django_db


def test_gpu_models_carry_reference_figures(api, catalog):
    models = {m["name"]: m for m in api.get("/api/v1/gpu-models/").data}
    assert {
        "t4",
        "a10",
        "l4",
        "l40s",
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h200-sxm-141gb",
    } <= set(models)
    h100 = models["h100-sxm5-80gb"]
    assert (h100["architecture"], h100["compute_capability"], h100["nvlink"]) == ("Hopper", "9.0", True)
    assert h100["mig_min_driver_version"] == "525.85.12"
    profiles = {p["name"]: p for p in h100["mig_profiles"]}
    assert profiles["3g.40gb"]["placements"] == [0, 4] and profiles["3g.40gb"]["memory_slices"] == 4
    assert profiles["1g.10gb"]["max_instances"] == 7
    assert models["l4"]["mig_profiles"] == [] and models["l4"]["mig_max_instances"] == 0


def test_driver_releases_by_branch(api, catalog):
    drivers = {d["version"]: d for d in api.get("/api/v1/driver-releases/").data}
    assert {d["branch"] for d in drivers.values()} >= {535, 550, 570, 580}
    assert "Blackwell" not in drivers["535.230.02"]["architectures"]
    assert "Volta" not in drivers["620.70.06"]["architectures"]
    assert drivers["580.105.08"]["branch_type"] == "ltsb" and drivers["580.105.08"]["cuda_version"] == "13.0"
    assert api.get("/api/v1/driver-releases/570.133.20/").data["branch_end_of_life"] == "2026-02-28"


def test_driver_compatibility_lists_reasons(api, catalog):
    rows = api.get("/api/v1/gpu-models/b200-sxm-180gb/drivers/", {"sharing_mode": "mig"}).data
    by_version = {r["driver"]["version"]: r for r in rows}
    assert by_version["580.105.08"]["compatible"] is True
    rules = {r["rule"] for r in by_version["535.309.01"]["refusals"]}
    assert rules == {"architecture", "gpu_minimum", "mig_minimum", "end_of_life"}


def test_catalog_is_read_only_for_tenants(api, catalog):
    assert api.post("/api/v1/gpu-models/", {"name": "x"}).status_code == 403
    assert api.delete("/api/v1/driver-releases/580.105.08/").status_code == 403


def test_kubernetes_versions_and_regions(api, catalog):
    versions = api.get("/api/v1/kubernetes-versions/").data
    assert any(v["is_default"] for v in versions)
    regions = {r["name"]: r for r in api.get("/api/v1/regions/").data}
    us = {row["gpu_model"]: row for row in regions["us-east-1"]["inventory"]}
    # What this tenant may get, not the region's total: the platform's default quota binds first.
    assert us["h100-sxm5-80gb"] == {
        "gpu_model": "h100-sxm5-80gb",
        "available_gpus": 64,
        "limited_by": "quota",
        "quota_left_gpus": 64,
    }


def test_seed_is_idempotent(catalog):
    from catalog.models import DriverRelease, MigProfile
    from catalog.seed import seed_catalog

    before = (DriverRelease.objects.count(), MigProfile.objects.count())
    seed_catalog()
    assert (DriverRelease.objects.count(), MigProfile.objects.count()) == before


def test_openapi_schema_and_docs(api, client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert {"/api/v1/clusters/", "/api/v1/node-pools/{id}/", "/api/v1/gpu-models/{name}/drivers/"} <= set(
        paths
    )
    assert client.get("/api/docs/").status_code == 200


def test_api_root_lists_resources(api):
    root = api.get("/api/v1/").data
    assert {"clusters", "node-pools", "nodes", "gpu-models", "driver-releases", "regions", "tokens"} <= set(
        root
    )
