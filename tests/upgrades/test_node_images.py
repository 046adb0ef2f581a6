"""Node images on the simulator: a run of `node_image` replaces each machine with one booted from the new
image (its kernel reported by the node's preflight facts), and the rules of image × driver × sharing
mode refuse what would not work, naming the rule."""

import pytest

from catalog.models import DriverRelease, GpuModel, NodeImage
from nodepools import services as pool_services
from nodepools.models import Node
from nvke.errors import Conflict, Incompatible
from nvke.providers.simulator.models import SimNode
from upgrades import control_plane, services
from upgrades.compatibility import upgrade_refusals

from .conftest import drive

pytestmark = pytest.mark.django_db
OLD_KERNEL, JAMMY, NOBLE = "ubuntu-2004-gpu-2023-04", "ubuntu-2204-gpu-2025-06", "ubuntu-2404-gpu-2026-10"
WITH_580 = "ubuntu-2404-gpu-580-2026-10"  # preinstalls 580.105.08, the upgrade pools' driver


def image(name: str) -> NodeImage:
    return NodeImage.objects.get(name=name)


def rules(pool) -> dict[str, str]:
    document = control_plane.document(pool.cluster)
    return {o["image"]: o["rule"] for o in document["pools"][0]["image_options"]}


def test_an_image_run_replaces_each_machine_keeping_its_kubelet_and_driver(context, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=3, claims=2)
    driver = pool.driver_release.version
    run = drive(services.create_run(context=context, pool=pool, node_image=image(JAMMY), max_unavailable="1"))
    assert (run.kind, run.status, run.max_unavailable_seen) == ("image", "completed", 1)
    assert run.message == f"All 3 nodes run image {JAMMY}." and run.previous_node_image is None
    pool.refresh_from_db()
    assert pool.node_image.name == JAMMY and pool.kubernetes_version == "1.35"
    nodes = Node.objects.filter(pool=pool)
    assert set(nodes.values_list("node_image", "kubelet_version", "driver_version", "cordoned")) == {
        (JAMMY, "v1.35.0", driver, False)
    }
    sims = SimNode.objects.filter(pool=pool.name)
    assert {sim.preflight.get("kernel_version") for sim in sims} == {"5.15.0-141-generic"}
    assert {"Cordoned", "ClaimsEvicted", "Replacing", "Validated"} <= set(
        run.history.values_list("reason", flat=True)
    )
    with pytest.raises(Conflict) as refused:  # undone by another image run, not a rollback
        services.control(run, "rollback", context=context)
    assert refused.value.code == "cannot_rollback"


def test_image_rules_name_the_kernel_the_preinstalled_driver_and_the_same_image(
    context, owner, make_cluster, make_pool
):
    cluster = make_cluster(owner.memberships.get().tenant, "prod")
    pool = make_pool(cluster, sharing_mode="fractional", node_image=image(NOBLE))
    assert rules(pool) == {
        OLD_KERNEL: "kernel_too_old",  # 5.4 < 5.10: no GPU sharing
        JAMMY: "",
        NOBLE: "same_image",
        WITH_580: "",  # the pool's own driver
    }
    with pytest.raises(Incompatible) as refused:
        services.create_run(context=context, pool=pool, node_image=image(OLD_KERNEL))
    assert (refused.value.code, refused.value.field) == ("kernel_too_old", "node_image")

    pool.driver_release = DriverRelease.objects.get(version="595.71.05")
    pool.save()
    assert rules(pool)[WITH_580] == "image_driver"


def test_a_pool_on_a_preinstalled_driver_moves_its_driver_only_with_its_image(make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    target = DriverRelease.objects.get(version="595.71.05")
    assert "image_driver" not in [r.rule for r in upgrade_refusals(pool, target)]
    pool.node_image = image(WITH_580)
    pool.save()
    assert [r.rule for r in upgrade_refusals(pool, target)] == ["image_driver"]


def test_new_pools_get_the_default_image_and_a_sharing_pool_refuses_an_old_kernel(
    context, make_cluster, owner
):
    cluster = make_cluster(owner.memberships.get().tenant, "prod")
    fields = dict(
        name="l4",
        gpu_model=GpuModel.objects.get(name="l4"),
        gpus_per_node=2,
        node_count=1,
        max_nodes=2,
        driver_release=DriverRelease.objects.get(version="580.105.08"),
    )
    assert pool_services.new_pool(context=context, cluster=cluster, **fields).node_image.name == NOBLE
    with pytest.raises(Incompatible) as refused:
        pool_services.new_pool(
            context=context, cluster=cluster, sharing_mode="mps", node_image=image(OLD_KERNEL), **fields
        )
    assert (refused.value.code, refused.value.field) == ("kernel_too_old", "node_image")


def test_the_api_takes_an_image_run_and_lists_images_with_their_rules(api, make_upgrade_pool):
    pool = make_upgrade_pool(nodes=1)
    data = api.get(f"/api/v1/clusters/{pool.cluster_id}/versions/").data
    assert {o["image"]: o["allowed"] for o in data["pools"][0]["image_options"]} == {
        OLD_KERNEL: True,  # an exclusive pool shares no GPU: any kernel
        JAMMY: True,
        NOBLE: True,
        WITH_580: True,
    }
    assert [i["name"] for i in api.get("/api/v1/node-images/").data][0] == NOBLE  # the newest first
    both = api.post(
        "/api/v1/upgrades/",
        {"pool": pool.pk, "node_image": JAMMY, "kubernetes_version": "1.35"},
        format="json",
    )
    assert (both.status_code, both.data["code"]) == (400, "one_target")
    unknown = api.post("/api/v1/upgrades/", {"pool": pool.pk, "node_image": "windows-95"}, format="json")
    assert unknown.status_code == 400 and "node_image" in unknown.data["details"]["fields"]
    created = api.post("/api/v1/upgrades/", {"pool": pool.pk, "node_image": JAMMY}, format="json")
    assert created.status_code == 201, created.data
    assert (created.data["kind"], created.data["node_image"], created.data["previous_node_image"]) == (
        "image",
        JAMMY,
        None,
    )
