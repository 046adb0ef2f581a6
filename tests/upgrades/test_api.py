"""Upgrades API: driver options, create with refusals, every control and its impossible transitions,
tenancy (404) and roles (403), history, fleet rollouts for operators."""

import pytest
from django.contrib.auth import get_user_model

from catalog.models import DriverRelease
from nodepools.models import Node
from nvke.providers.simulator.models import SimFault
from upgrades.controller import tick
from upgrades.models import UpgradeRun
from upgrades.rollouts import control_rollout, create_rollout

from .conftest import drive

pytestmark = pytest.mark.django_db
TARGET = "595.71.05"


@pytest.fixture
def pool(make_upgrade_pool):
    return make_upgrade_pool(nodes=3)


def create(api, pool, **fields):
    return api.post("/api/v1/upgrades/", {"pool": pool.pk, "target_release": TARGET, **fields}, format="json")


def test_driver_options_list_each_refusal_with_its_rule(api, pool):
    response = api.get(f"/api/v1/node-pools/{pool.pk}/driver-options/", {"cuda": "13.2"})
    assert response.status_code == 200
    rules = {row["driver"]["version"]: [r["rule"] for r in row["refusals"]] for row in response.data}
    assert rules[TARGET] == [] and rules["620.70.06"] == []
    assert rules["580.105.08"] == ["same_release", "cuda_minimum"]
    assert rules["535.230.02"] == ["end_of_life", "cuda_minimum"]
    messages = {r["message"] for row in response.data for r in row["refusals"]}
    assert "CUDA 13.2 needs ≥ 595; driver 580.126.09 supports CUDA 13.0." in messages
    assert "Driver branch 535 reached end of life on 2026-06-30." in messages


@pytest.mark.parametrize("cuda", ["abc", "12.", "v12.8"])
def test_driver_options_refuse_a_cuda_that_is_no_version(api, pool, cuda):
    response = api.get(f"/api/v1/node-pools/{pool.pk}/driver-options/", {"cuda": cuda})
    assert (response.status_code, response.data["code"], response.data["details"]["field"]) == (
        400,
        "invalid_version",
        "cuda",
    )


def test_driver_options_take_a_bare_cuda_major(api, pool):
    response = api.get(f"/api/v1/node-pools/{pool.pk}/driver-options/", {"cuda": "13"})
    assert response.status_code == 200
    rules = {row["driver"]["version"]: [r["rule"] for r in row["refusals"]] for row in response.data}
    assert rules[TARGET] == [] and rules["535.230.02"] == ["end_of_life", "cuda_minimum"]


def test_create_starts_a_run_with_every_node(api, pool):
    response = create(api, pool, max_unavailable="50%", canary_nodes=1)
    assert response.status_code == 201, response.data
    data = response.data
    assert (data["status"], data["previous_release"], data["max_unavailable"]) == (
        "running",
        "580.105.08",
        "50%",
    )
    assert [n["state"] for n in data["nodes"]] == ["upgrade-required"] * 3
    assert [n["canary"] for n in data["nodes"]] == [True, False, False]


@pytest.mark.parametrize(
    "fields, status, code, field",
    [
        ({"target_release": "999.1.1"}, 400, "unknown_release", "target_release"),
        ({"target_release": "535.230.02"}, 400, "end_of_life", "target_release"),
        ({"target_release": "580.105.08"}, 400, "same_release", "target_release"),
        ({"cuda": "13.5"}, 400, "cuda_minimum", "target_release"),
        ({"cuda": "abc"}, 400, "invalid_version", "cuda"),
        ({"max_unavailable": "0"}, 400, "invalid", "max_unavailable"),
        ({"max_unavailable": "150%"}, 400, "invalid", "max_unavailable"),
        ({"canary_nodes": 4}, 400, "invalid", "canary_nodes"),
        ({"failed_nodes": "drain"}, 400, "invalid", "failed_nodes"),
        ({"failed_nodes": ""}, 400, "invalid", "failed_nodes"),
    ],
)
def test_refused_creates_name_the_rule_and_write_nothing(api, pool, fields, status, code, field):
    response = create(api, pool, **fields)
    assert (response.status_code, response.data["code"], response.data["details"]["field"]) == (
        status,
        code,
        field,
    )
    assert not UpgradeRun.objects.exists()


def test_failed_nodes_is_stored_with_the_run_and_each_node_says_whether_it_is_kept_cordoned(api, pool):
    assert create(api, pool, start=False).data["failed_nodes"] == "keep-cordoned"  # the default
    control(api, UpgradeRun.objects.get().pk, "abort")
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    created = create(api, pool, failed_nodes="uncordon", failure_budget=5)
    assert created.status_code == 201 and created.data["failed_nodes"] == "uncordon"
    run = drive(UpgradeRun.objects.get(pk=created.data["id"]))
    data = api.get(f"/api/v1/upgrades/{run.pk}/").data
    row = next(n for n in data["nodes"] if n["name"] == victim.name)
    assert (row["state"], row["driver_touched"], row["kept_cordoned"]) == ("upgrade-failed", True, False)

    back = control(api, run.pk, "rollback").data
    row = next(n for n in back["nodes"] if n["name"] == victim.name)
    # it reports the old driver, but its install failed: reinstalled; back in service, so not touched
    assert (row["state"], row["driver_touched"], row["pre_cordoned"]) == ("upgrade-required", False, False)
    assert drive(UpgradeRun.objects.get(pk=back["id"])).status == "completed"
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    data = create(api, pool, failure_budget=5).data  # keep-cordoned: the same failure keeps it out
    drive(UpgradeRun.objects.get(pk=data["id"]))
    nodes = {n["name"]: n for n in api.get(f"/api/v1/upgrades/{data['id']}/").data["nodes"]}
    assert nodes[victim.name]["kept_cordoned"] is True
    assert "Kept cordoned" in nodes[victim.name]["message"]
    assert [n["kept_cordoned"] for name, n in nodes.items() if name != victim.name] == [False, False]
    assert Node.objects.get(pk=victim.pk).cordoned


def test_second_live_run_on_a_pool_is_409(api, pool):
    assert create(api, pool).status_code == 201
    response = create(api, pool, target_release="620.70.06")
    assert (response.status_code, response.data["code"]) == (409, "upgrade_in_progress")


def control(api, run_id, name):
    return api.post(f"/api/v1/upgrades/{run_id}/{name}/")


def test_controls_and_their_impossible_transitions(api, pool):
    run_id = create(api, pool, start=False).data["id"]
    assert (control(api, run_id, "pause").status_code, control(api, run_id, "pause").data["code"]) == (
        409,
        "cannot_pause",
    )
    assert control(api, run_id, "start").data["status"] == "running"
    assert control(api, run_id, "start").data["code"] == "cannot_start"
    assert control(api, run_id, "approve").data["code"] == "cannot_approve"  # no approval canary
    assert control(api, run_id, "retry").data["code"] == "cannot_retry"  # nothing failed
    assert control(api, run_id, "rollback").data["code"] == "cannot_rollback"  # still running
    assert control(api, run_id, "pause").data["status"] == "paused"
    assert control(api, run_id, "resume").data["status"] == "running"
    assert control(api, run_id, "abort").data["status"] == "aborting"
    refused = control(api, run_id, "resume")
    assert (refused.status_code, refused.data["code"], refused.data["details"]["status"]) == (
        409,
        "cannot_resume",
        "aborting",
    )
    run = drive(UpgradeRun.objects.get(pk=run_id))
    assert run.status == "aborted"
    assert control(api, run_id, "resume").status_code == 409


def test_approve_lets_the_rest_follow_the_canary(api, pool):
    run_id = create(api, pool, canary_nodes=1, canary_approval=True, max_unavailable="2").data["id"]
    assert control(api, run_id, "approve").data["code"] == "cannot_approve"  # canary not done yet
    run = UpgradeRun.objects.get(pk=run_id)
    from upgrades.controller import tick

    for _ in range(15):
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    states = dict(run.nodes.values_list("canary", "state"))
    assert states == {True: "upgrade-done", False: "upgrade-required"}
    assert "waiting for approval" in UpgradeRun.objects.get(pk=run_id).message
    assert control(api, run_id, "approve").status_code == 200
    assert drive(run).status == "completed"


def test_finished_run_rolls_back(api, pool):
    run_id = create(api, pool, max_unavailable="3").data["id"]
    drive(UpgradeRun.objects.get(pk=run_id))
    assert control(api, run_id, "resume").data["code"] == "cannot_resume"
    back = control(api, run_id, "rollback")
    assert back.status_code == 201 and back.data["target_release"] == "580.105.08"
    assert back.data["rollback_of"] == run_id
    drive(UpgradeRun.objects.get(pk=back.data["id"]))
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", flat=True)) == {"580.105.08"}
    history = api.get(f"/api/v1/upgrades/{run_id}/history/").data
    assert history[0]["reason"] == "Created" and history[-1]["reason"] == "AllNodesUpgraded"
    assert {"node", "type", "reason", "message", "time"} <= set(history[0])


def test_other_tenants_runs_are_404(api, pool, make_member, client_for):
    run_id = create(api, pool).data["id"]
    stranger = client_for(make_member("globex", "owner"))
    assert stranger.get(f"/api/v1/upgrades/{run_id}/").status_code == 404
    assert stranger.post(f"/api/v1/upgrades/{run_id}/pause/").status_code == 404
    assert stranger.get(f"/api/v1/upgrades/{run_id}/history/").status_code == 404
    assert stranger.get(f"/api/v1/node-pools/{pool.pk}/driver-options/").status_code == 404
    assert stranger.get("/api/v1/upgrades/").data["results"] == []
    response = stranger.post("/api/v1/upgrades/", {"pool": pool.pk, "target_release": TARGET}, format="json")
    assert response.status_code == 400 and "pool" in response.data["details"]["fields"]


def test_viewer_reads_but_cannot_start_or_control(api, pool, make_member, client_for):
    run_id = create(api, pool).data["id"]
    viewer = client_for(make_member("acme", "viewer"), token=True)
    assert viewer.get(f"/api/v1/upgrades/{run_id}/").status_code == 200
    assert viewer.post(f"/api/v1/upgrades/{run_id}/pause/").status_code == 403
    assert (
        viewer.post(
            "/api/v1/upgrades/", {"pool": pool.pk, "target_release": TARGET}, format="json"
        ).status_code
        == 403
    )
    assert UpgradeRun.objects.get(pk=run_id).status == "running"


def test_fleet_rollouts_are_for_operators_and_go_in_waves(
    api, owner, make_member, make_upgrade_pool, client_for
):
    from tests.upgrades.conftest import drive as drive_run
    from upgrades.rollouts import advance

    first = make_upgrade_pool(nodes=2, name="a")
    second = make_upgrade_pool(nodes=2, name="b", cluster=first.cluster)
    body = {"target_release": TARGET, "gpu_model": "l4", "from_branch": 580, "pools_per_wave": 1}
    assert api.post("/api/v1/fleet-rollouts/", body, format="json").status_code == 403
    staff = get_user_model().objects.create_user("op", password="pw-secret-123", is_staff=True)
    operator = client_for(staff)
    # The strategy is free-form JSON here: each value is still checked and named (it was a 500).
    for bad, field in [
        ({"failure_budget": "x"}, "failure_budget"),
        ({"canary_bake_s": -1}, "canary_bake_s"),
        ({"drain_timeout_s": True}, "drain_timeout_s"),
        ({"canary_approval": "yes"}, "canary_approval"),
    ]:
        refused = operator.post("/api/v1/fleet-rollouts/", {**body, "strategy": bad}, format="json")
        assert refused.status_code == 400 and refused.data["details"]["field"] == field, refused.data
    assert not UpgradeRun.objects.exists()
    created = operator.post(
        "/api/v1/fleet-rollouts/", {**body, "strategy": {"max_unavailable": "1"}}, format="json"
    )
    assert created.status_code == 201, created.data
    waves = {r["pool"]: (r["wave"], r["status"]) for r in created.data["runs"]}
    assert waves == {first.pk: (0, "running"), second.pk: (1, "pending")}
    drive_run(UpgradeRun.objects.get(pool=first))
    advance(created.data["id"])
    drive_run(UpgradeRun.objects.get(pool=second))
    advance(created.data["id"])
    final = operator.get(f"/api/v1/fleet-rollouts/{created.data['id']}/").data
    assert final["status"] == "completed" and {r["status"] for r in final["runs"]} == {"completed"}
    assert (
        operator.post(f"/api/v1/fleet-rollouts/{created.data['id']}/resume/").data["code"] == "cannot_resume"
    )
    assert api.get(f"/api/v1/fleet-rollouts/{created.data['id']}/").status_code == 403


def test_driver_options_refuse_a_branch_without_the_pools_architecture(api, owner, make_cluster, make_pool):
    cluster = make_cluster(owner.memberships.get().tenant, "blackwell")
    pool = make_pool(cluster, name="b200", gpu_model="b200-sxm-180gb", nodes=1, gpus_per_node=8)
    rows = {r["driver"]["version"]: r for r in api.get(f"/api/v1/node-pools/{pool.pk}/driver-options/").data}
    assert [r["rule"] for r in rows["535.230.02"]["refusals"]] == [
        "architecture",
        "gpu_minimum",
        "end_of_life",
    ]
    assert (
        rows["535.230.02"]["refusals"][0]["message"]
        == "Driver branch 535 (535.230.02) does not support Blackwell."
    )
    refused = create(api, pool, target_release="550.163.01")
    assert (refused.status_code, refused.data["code"]) == (400, "architecture")
    assert [r["rule"] for r in refused.data["details"]["rules"]][0] == "architecture"
    assert refused.data["details"]["field"] == "target_release"


def test_a_pool_waiting_in_one_rollout_is_skipped_by_the_next(owner, make_upgrade_pool):
    from catalog.models import DriverRelease
    from upgrades.rollouts import create_rollout, plan_rollout

    first = make_upgrade_pool(nodes=1, name="a")
    second = make_upgrade_pool(nodes=1, name="b", cluster=first.cluster)
    target = DriverRelease.objects.get(version=TARGET)
    create_rollout(target_release=target, pools_per_wave=1)
    assert UpgradeRun.objects.get(pool=second).status == "pending"  # its wave has not come yet
    plan = plan_rollout(target)
    assert plan.waves == []
    assert {(s["pool"], s["rule"]) for s in plan.skipped} == {
        (first.pk, "upgrade_in_progress"),
        (second.pk, "upgrade_in_progress"),
    }


def test_operators_retry_and_approve_one_run_of_a_rollout_as_themselves(
    api, owner, make_upgrade_pool, client_for
):
    from audit.models import AuditEntry
    from catalog.models import DriverRelease
    from upgrades.models import FleetRollout
    from upgrades.rollouts import create_rollout

    pool = make_upgrade_pool(nodes=2)
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    staff = get_user_model().objects.create_user("op", password="pw-secret-123", is_staff=True)
    operator = client_for(staff)
    rollout = create_rollout(
        target_release=DriverRelease.objects.get(version=TARGET), user=staff, failure_budget=5
    )
    run = drive(rollout.runs.get())
    assert (run.status, run.nodes.get(name=victim.name).state) == ("failed", "upgrade-failed")
    url = f"/api/v1/fleet-rollouts/{rollout.pk}/runs/{run.pk}"

    assert api.post(f"{url}/retry/").status_code == 403  # the tenant's owner is no operator
    refused = operator.post(f"{url}/approve/")  # no approval canary
    assert (refused.status_code, refused.data["code"]) == (409, "cannot_approve")
    other = FleetRollout.objects.create(target_release=rollout.target_release)  # without this run
    assert operator.post(f"/api/v1/fleet-rollouts/{other.pk}/runs/{run.pk}/retry/").status_code == 404
    assert operator.post(f"{url}/pause/").status_code == 404  # the rollout's own controls do that
    for bad in ("-1", "x"):  # a JSON 404 like any other unknown id, not the site's page
        assert (
            operator.post(f"/api/v1/fleet-rollouts/{rollout.pk}/runs/{bad}/retry/").data["code"]
            == "not_found"
        )

    SimFault.objects.all().delete()
    response = operator.post(f"{url}/retry/")
    assert (response.status_code, response.data["id"], response.data["status"]) == (200, run.pk, "running")
    entry = AuditEntry.objects.filter(object_type="upgrades.upgraderun", object_id=str(run.pk)).first()
    assert (entry.tenant_id, entry.actor_user_id, entry.changes["status"]) == (
        run.tenant_id,
        staff.pk,
        ["failed", "running"],
    )
    assert drive(UpgradeRun.objects.get(pk=run.pk)).status == "completed"


def test_a_rollout_aborts_while_one_of_its_runs_is_aborting_already(api, make_upgrade_pool):
    """A tenant may abort their own run of a rollout; the operator's abort of the whole rollout then
    passes on to the runs still going and leaves that one to finish aborting."""
    first = make_upgrade_pool(nodes=2, name="a")
    make_upgrade_pool(nodes=2, name="b", cluster=first.cluster)
    rollout = create_rollout(target_release=DriverRelease.objects.get(version=TARGET), pools_per_wave=2)
    mine, theirs = rollout.runs.order_by("pool__name")
    for run in (mine, theirs):
        tick(run.pk, UpgradeRun.objects.get(pk=run.pk).tick_seq)  # under way: nodes in flight
    assert control(api, mine.pk, "abort").data["status"] == "aborting"  # the tenant's own abort

    assert control_rollout(rollout, "abort").status == "aborted"
    assert UpgradeRun.objects.get(pk=theirs.pk).status == "aborting"  # passed on
    assert UpgradeRun.objects.get(pk=mine.pk).status == "aborting"  # left to finish
