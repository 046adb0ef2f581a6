"""Per-pool rescaling policy: bounds, ingestion with each pool's thresholds (through the per-process
cache), decisions with each pool's seconds and maximum growth, disabled pools, the API and the page."""

import time

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework import serializers
from rest_framework.test import APIClient

from audit.models import AuditEntry
from nodepools.models import NodePool
from nvke.errors import DomainError
from nvke.tenancy.models import ApiToken
from telemetry import policy, rescale, store
from telemetry.api.serializers import PoolRescalingSerializer
from telemetry.models import ClaimScaling, PoolRescaling, TelemetryEvent
from telemetry.rescale import RescaleDecision

from ..frontend.helpers import field_errors
from .conftest import gpu_of
from .test_rescale import compute_of, report

pytestmark = pytest.mark.django_db

DEFAULTS = {
    "enabled": True,
    "pressure_percent": 90,
    "pressure_s": 30,
    "idle_percent": 10,
    "idle_s": 600,
    "max_growth_percent": 200,
}


def set_policy(pool: NodePool, **changes) -> policy.Policy:
    return policy.set_pool_policy(pool, changes)


def states_of(*claims) -> dict[int, dict[str, float]]:
    return store.claim_states([c.pk for c in claims])


# --- the policy and its bounds ---------------------------------------------------------------------


def test_a_pool_without_a_policy_follows_the_platform_defaults(add_pool):
    pool = add_pool("plain")
    assert policy.for_pools([pool.pk])[pool.pk] == policy.Policy(**DEFAULTS)
    with override_settings(TELEMETRY_PRESSURE_PERCENT=80, TELEMETRY_IDLE_S=120):
        assert policy.for_pools([pool.pk])[pool.pk] == policy.Policy(
            **{**DEFAULTS, "pressure_percent": 80, "idle_s": 120}
        )


@pytest.mark.parametrize(
    "changes, field, code",
    [
        ({"pressure_percent": 0}, "pressure_percent", "out_of_bounds"),
        ({"pressure_percent": 101}, "pressure_percent", "out_of_bounds"),
        ({"idle_percent": 0}, "idle_percent", "out_of_bounds"),
        ({"idle_percent": 90}, "idle_percent", "out_of_bounds"),  # not below pressure_percent (90)
        ({"pressure_percent": 50, "idle_percent": 60}, "idle_percent", "out_of_bounds"),
        ({"pressure_s": 0}, "pressure_s", "out_of_bounds"),
        ({"pressure_s": 3601}, "pressure_s", "out_of_bounds"),
        ({"idle_s": 0}, "idle_s", "out_of_bounds"),
        ({"idle_s": 86_401}, "idle_s", "out_of_bounds"),
        ({"max_growth_percent": 99}, "max_growth_percent", "out_of_bounds"),
        ({"max_growth_percent": 401}, "max_growth_percent", "out_of_bounds"),
        ({"pressure_s": 2.5}, "pressure_s", "invalid"),
        ({"enabled": "no"}, "enabled", "invalid"),
        ({"pressure_pct": 70}, "pressure_pct", "invalid"),
    ],
)
def test_a_policy_out_of_bounds_is_refused_naming_the_field(add_pool, changes, field, code):
    pool = add_pool("frac2")
    with pytest.raises(DomainError) as refused:
        set_policy(pool, **changes)
    assert (refused.value.field, refused.value.code) == (field, code)
    assert refused.value.message.startswith(f"{field}: ")
    assert not PoolRescaling.objects.exists()


def test_the_bounds_are_inclusive(add_pool):
    pool = add_pool("edges")
    low = set_policy(pool, pressure_percent=2, idle_percent=1, pressure_s=1, idle_s=1, max_growth_percent=100)
    high = set_policy(pool, pressure_percent=100, idle_percent=99, pressure_s=3600, idle_s=86_400)
    assert (low.pressure_s, low.max_growth_percent, high.idle_s) == (1, 100, 86_400)
    row = PoolRescaling.objects.get(pool=pool)
    assert (row.pressure_percent, row.idle_percent, row.max_growth_percent) == (100, 99, 100)


def test_the_database_refuses_a_row_out_of_bounds_too(add_pool):
    pool = add_pool("raw")
    values = {**DEFAULTS, "idle_percent": 95}
    with pytest.raises(IntegrityError), transaction.atomic():
        PoolRescaling.objects.create(tenant=pool.tenant, pool=pool, **values)


def test_patch_keeps_the_other_values_and_reset_takes_the_defaults(add_pool):
    pool = add_pool("frac2")
    set_policy(pool, pressure_percent=70, idle_s=120)
    assert set_policy(pool, enabled=False) == policy.Policy(
        **{**DEFAULTS, "enabled": False, "pressure_percent": 70, "idle_s": 120}
    )
    assert policy.set_pool_policy(pool, {"pressure_s": 10}, reset=True) == policy.Policy(
        **{**DEFAULTS, "pressure_s": 10}
    )


# --- ingestion ---------------------------------------------------------------------------------------


def test_each_claims_stretch_starts_at_its_own_pools_pressure_threshold(add_pool, claim_in):
    eager, plain = add_pool("eager"), add_pool("plain")
    set_policy(eager, pressure_percent=70, idle_percent=20)
    hot, cold = claim_in("hot", 40, pool=eager), claim_in("cold", 40, pool=plain)
    start = time.time() - 10
    report(hot, [75] * 3, start)
    report(cold, [75] * 3, start)
    states = states_of(hot, cold)
    assert states[hot.pk]["over_since"] == pytest.approx(start)
    assert "over_since" not in states[cold.pk] and "idle_since" not in states[cold.pk]
    # Idle is per pool too: 15 % is idle for the eager pool (≤ 20), not for the default one (≤ 10).
    report(hot, [15] * 2, start + 5)
    report(cold, [15] * 2, start + 5)
    states = states_of(hot, cold)
    assert "over_since" not in states[hot.pk] and states[hot.pk]["idle_since"] == pytest.approx(start + 5)
    assert "idle_since" not in states[cold.pk]


def test_ingestion_reads_policies_from_a_cache_renewed_every_few_seconds(add_pool, claim_in, monkeypatch):
    """No query per batch: one when the cache is renewed; a change made elsewhere (another process:
    here a bare UPDATE that this process's cache does not hear of) applies once CACHE_TTL_S passed."""
    pool = add_pool("eager")
    set_policy(pool, pressure_percent=70, idle_percent=20)
    claim = claim_in("hot", 40, pool=pool)
    node_id, gpu_id = gpu_of(claim).node_id, gpu_of(claim).pk
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the cache's clock (nvke.caches)
    policy.forget()

    def write(usage: float, ts: float) -> int:
        with CaptureQueriesContext(connection) as queries:
            store.write(node_id, [store.Sample(gpu_id, ts, {"util": 50}, {claim.pk: usage})], ts)
        return len(queries)

    now = time.time()
    assert write(75, now - 20) == 1  # the first batch loads the node's policy
    assert write(75, now - 19) == 0
    assert states_of(claim)[claim.pk]["over_since"] == pytest.approx(now - 20)
    PoolRescaling.objects.filter(pool=pool).update(pressure_percent=80)
    clock[0] += policy.CACHE_TTL_S - 0.1
    assert write(75, now - 18) == 0  # still the cached 70 %: the stretch goes on
    assert states_of(claim)[claim.pk]["over_since"] == pytest.approx(now - 20)
    clock[0] += 0.2
    assert write(75, now - 17) == 1  # renewed: 75 % is below the new 80 %, the stretch ends
    assert "over_since" not in states_of(claim)[claim.pk]


def test_a_policy_saved_in_this_process_applies_to_the_next_batch(add_pool, claim_in):
    pool = add_pool("eager")
    claim = claim_in("hot", 40, pool=pool)
    start = time.time() - 10
    report(claim, [75], start)
    assert "over_since" not in states_of(claim)[claim.pk]
    set_policy(pool, pressure_percent=70, idle_percent=20)
    report(claim, [75], start + 1)
    assert states_of(claim)[claim.pk]["over_since"] == pytest.approx(start + 1)


def test_the_policy_cache_gives_unknown_nodes_the_defaults():
    assert policy.for_nodes([987_654_321]) == {987_654_321: policy.Policy(**DEFAULTS)}


# --- decisions ---------------------------------------------------------------------------------------


def test_decide_uses_each_claims_pool_seconds():
    fast = policy.Policy(**{**DEFAULTS, "pressure_s": 10, "idle_s": 60})
    now = 10_000.0
    states = {
        1: {"ts": now, "over_since": now - 15},  # 15 s of pressure: enough for fast, not the default 30
        2: {"ts": now, "over_since": now - 15},
        3: {"ts": now, "idle_since": now - 90},  # 90 s idle: enough for fast, not the default 600
        4: {"ts": now, "idle_since": now - 90},
    }
    assert rescale.decide(states, grown={3, 4}, policies={1: fast, 3: fast}) == [
        RescaleDecision(1, "grow"),
        RescaleDecision(3, "shrink"),
    ]
    assert rescale.decide(states, grown={3, 4}) == []


def test_decide_never_grows_a_disabled_pools_claims_but_shrinks_them():
    off = policy.Policy(**{**DEFAULTS, "enabled": False})
    now = 10_000.0
    states = {1: {"ts": now, "over_since": now - 3600}, 2: {"ts": now, "idle_since": now - 3600}}
    assert rescale.decide(states, grown={2}, policies={1: off, 2: off}) == [RescaleDecision(2, "shrink")]


def test_a_pools_pressure_seconds_decide_when_its_claims_grow(add_pool, claim_in):
    fast, plain = add_pool("fast"), add_pool("plain")
    set_policy(fast, pressure_s=10)
    quick, slow = claim_in("quick", 40, pool=fast), claim_in("slow", 40, pool=plain)
    report(quick, [95] * 12, time.time() - 20)  # 11 s above the threshold
    report(slow, [95] * 12, time.time() - 20)
    assert rescale.rescale() == [(quick.pk, "claim.grown")]
    quick.refresh_from_db(), slow.refresh_from_db()
    assert (quick.compute_percent, slow.compute_percent) == (60, 40)


def test_a_pools_max_growth_caps_its_claims(add_pool, claim_in):
    pool = add_pool("capped")
    set_policy(pool, max_growth_percent=150)
    claim = claim_in("infer", 40)
    report(claim, [95] * 31, time.time() - 80)
    assert rescale.rescale() == [(claim.pk, "claim.grown")]
    assert compute_of(claim) == 60  # 150 % of 40
    report(claim, [95] * 31, time.time() - 40)
    assert rescale.rescale() == [(claim.pk, "claim.throttled")]  # the default 200 % would grow to 80
    assert compute_of(claim) == 60
    assert "at its limit of 60% compute" in ClaimScaling.objects.get(claim=claim).reason


def test_a_disabled_pools_claims_never_grow_nor_are_throttled(add_pool, claim_in):
    pool = add_pool("frozen")
    set_policy(pool, enabled=False)
    claim, neighbour = claim_in("infer", 40), claim_in("neighbour", 60)  # the GPU is full as well
    report(claim, [99] * 120, time.time() - 130)
    assert rescale.rescale() == []
    claim.refresh_from_db()
    assert (claim.compute_percent, compute_of(claim), compute_of(neighbour)) == (40, 40, 60)
    assert not TelemetryEvent.objects.exists()
    assert not ClaimScaling.objects.filter(state="throttled").exists()
    assert "over_since" in states_of(claim)[claim.pk]  # the pressure is seen, only not acted on


@override_settings(TELEMETRY_IDLE_S=60)
def test_disabling_a_pool_lets_its_grown_claim_shrink_back_and_ends_throttling(add_pool, claim_in):
    pool = add_pool("only")
    grown, throttled = claim_in("grown", 40), claim_in("throttled", 40)
    start = time.time() - 300
    report(grown, [95] * 31, start)
    assert rescale.rescale() == [(grown.pk, "claim.grown")]  # 60 %: the GPU now holds 100 %
    report(throttled, [95] * 31, start + 40)
    assert rescale.rescale() == [(throttled.pk, "claim.throttled")]

    set_policy(pool, enabled=False)
    report(throttled, [95] * 3, start + 80)  # still under pressure, but its pool no longer grows claims
    assert rescale.rescale() == []
    assert ClaimScaling.objects.get(claim=throttled).state == "normal"
    report(grown, [5] * 61, start + 90)
    assert rescale.rescale() == [(grown.pk, "claim.shrunk")]
    assert compute_of(grown) == 40


# --- API ---------------------------------------------------------------------------------------------

URL = "/api/v1/telemetry/pool-rescaling/"


def test_the_list_shows_each_of_the_tenants_pools_with_defaults_where_it_has_no_policy(
    api, add_pool, make_member, make_cluster, make_pool
):
    frac, other = add_pool("frac2"), add_pool("frac3")
    set_policy(other, pressure_percent=70)
    stranger = make_member("globex", "owner")
    make_pool(make_cluster(stranger.memberships.get().tenant, "theirs"), name="theirs")

    response = api.get(URL)
    assert response.status_code == 200
    rows = {row["pool"]: row for row in response.data["results"]}
    assert set(rows) == {frac.pk, other.pk}
    assert rows[frac.pk] == {
        "pool": frac.pk,
        "cluster": frac.cluster_id,
        "pool_name": "frac2",
        "custom": False,
        **DEFAULTS,
        "updated_at": None,
    }
    assert rows[other.pk]["custom"] is True and rows[other.pk]["pressure_percent"] == 70
    # The declared fields, in their order; the date-time as DateTimeField writes it.
    assert list(rows[other.pk]) == list(PoolRescalingSerializer().fields)
    updated_at = PoolRescaling.objects.get(pool=other).updated_at
    assert rows[other.pk]["updated_at"] == serializers.DateTimeField().to_representation(updated_at)


def test_put_sets_the_policy_patch_changes_fields_and_both_are_audited(api, owner, add_pool):
    pool = add_pool("frac2")
    response = api.put(f"{URL}{pool.pk}/", {"enabled": False, "pressure_percent": 70}, format="json")
    assert response.status_code == 200, response.data
    assert response.data == {
        **response.data,
        **DEFAULTS,
        "enabled": False,
        "pressure_percent": 70,
        "custom": True,
    }
    patched = api.patch(f"{URL}{pool.pk}/", {"pressure_s": 10}, format="json")
    assert patched.status_code == 200, patched.data
    assert (patched.data["enabled"], patched.data["pressure_percent"], patched.data["pressure_s"]) == (
        False,
        70,
        10,
    )
    assert api.get(f"{URL}{pool.pk}/").data == patched.data
    row = PoolRescaling.objects.get(pool=pool)
    entries = AuditEntry.objects.filter(object_type="telemetry.poolrescaling", object_id=str(row.pk))
    assert [(e.action, e.actor_user_id) for e in entries.order_by("pk")] == [
        ("create", owner.pk),
        ("update", owner.pk),
    ]
    assert entries.order_by("pk").last().changes == {"pressure_s": [30, 10]}


@pytest.mark.parametrize(
    "body, field, code",
    [
        ({"pressure_percent": 0}, "pressure_percent", "out_of_bounds"),
        ({"pressure_percent": 101}, "pressure_percent", "out_of_bounds"),
        ({"idle_percent": 95}, "idle_percent", "out_of_bounds"),
        ({"pressure_s": 0}, "pressure_s", "out_of_bounds"),
        ({"idle_s": 1_000_000}, "idle_s", "out_of_bounds"),
        ({"max_growth_percent": 50}, "max_growth_percent", "out_of_bounds"),
        ({"pressure_s": "soon"}, "pressure_s", "invalid"),
        ({"enabled": "maybe"}, "enabled", "invalid"),
        ({"pressure_pct": 70}, "pressure_pct", "invalid"),
    ],
)
@pytest.mark.parametrize("method", ["put", "patch"])
def test_bad_values_are_400_naming_the_field_and_write_nothing(api, add_pool, method, body, field, code):
    pool = add_pool("frac2")
    response = getattr(api, method)(f"{URL}{pool.pk}/", body, format="json")
    assert response.status_code == 400, response.data
    assert response.data["code"] == code
    assert response.data["message"].startswith(f"{field}: ")
    if code == "out_of_bounds":
        assert response.data["details"]["field"] == field
    else:
        assert field in response.data["details"]["fields"]
    assert not PoolRescaling.objects.exists()
    assert not AuditEntry.objects.filter(object_type="telemetry.poolrescaling").exists()


def test_members_change_viewers_and_read_only_tokens_read_other_tenants_get_404(
    add_pool, tenant, make_member, client_for
):
    pool = add_pool("frac2")
    url = f"{URL}{pool.pk}/"
    member = client_for(make_member("acme", "member"))
    assert member.patch(url, {"pressure_percent": 80}, format="json").status_code == 200

    viewer = client_for(make_member("acme", "viewer"))
    assert viewer.get(url).data["pressure_percent"] == 80
    assert viewer.patch(url, {"pressure_percent": 70}, format="json").status_code == 403
    assert viewer.put(url, {}, format="json").status_code == 403

    _, raw = ApiToken.issue(tenant=tenant, user=make_member("acme", "owner"), name="ro", scope="read-only")
    read_only = APIClient()
    read_only.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert read_only.get(url).status_code == 200
    refused = read_only.patch(url, {"pressure_percent": 70}, format="json")
    assert (refused.status_code, refused.data["code"]) == (403, "permission_denied")

    stranger = client_for(make_member("globex", "owner"))
    assert stranger.get(url).status_code == 404
    assert stranger.patch(url, {"pressure_percent": 70}, format="json").status_code == 404
    assert stranger.get(URL).data["results"] == []
    assert PoolRescaling.objects.get(pool=pool).pressure_percent == 80


def test_a_deleting_pools_policy_is_409(api, add_pool):
    pool = add_pool("frac2")
    NodePool.objects.filter(pk=pool.pk).update(status=NodePool.Status.DELETING)
    response = api.patch(f"{URL}{pool.pk}/", {"enabled": False}, format="json")
    assert (response.status_code, response.data["code"]) == (409, "deleting")
    assert not PoolRescaling.objects.exists()


# --- the pool page -----------------------------------------------------------------------------------


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def policy_block(response) -> str:
    page = response.content.decode()
    return page[
        page.index('<section id="rescaling"') : page.index("</section>", page.index('id="rescaling"'))
    ]


FORM = {
    "enabled": "on",
    "pressure_percent": "70",
    "pressure_s": "15",
    "max_growth_percent": "150",
    "idle_percent": "5",
    "idle_s": "300",
}


def test_the_pool_page_shows_the_policy_and_members_change_it(owner, add_pool):
    pool = add_pool("frac2")
    ui = browser(owner)
    section = policy_block(ui.get(f"/pools/{pool.pk}/"))
    assert "Dynamic rescaling" in section
    assert "usage ≥ 90% of its share for 30 s" in section and "the platform defaults" in section
    assert f'action="/pools/{pool.pk}/rescaling/"' in section
    assert 'name="pressure_percent" value="90"' in section

    response = ui.post(f"/pools/{pool.pk}/rescaling/", {**FORM, "enabled": ""})  # unchecked: off
    assert response.status_code == 302 and response.url == f"/pools/{pool.pk}/#rescaling"
    assert policy.for_pools([pool.pk])[pool.pk] == policy.Policy(
        enabled=False, pressure_percent=70, pressure_s=15, idle_percent=5, idle_s=300, max_growth_percent=150
    )
    section = policy_block(ui.get(f"/pools/{pool.pk}/"))
    assert "Off: claims never grow" in section and "this pool's own" in section
    assert "usage ≥ 70% of its share for 15 s" in section and "150% of its request" in section
    assert "usage ≤ 5% for 300 s" in section


@pytest.mark.parametrize(
    "change, field, message",
    [
        (
            {"idle_percent": "80"},
            "idle_percent",
            (
                "“Idle threshold (% of a claim's share)”: 80% must be below "
                "“Pressure threshold (% of a claim's share)” (70%)."
            ),
        ),
        (
            {"max_growth_percent": "500"},
            "max_growth_percent",
            "“Grow up to (% of the request)”: 500 is out of bounds",
        ),
        ({"pressure_s": ""}, "pressure_s", "This field is required."),
    ],
)
def test_the_form_shows_errors_under_their_fields_and_saves_nothing(owner, add_pool, change, field, message):
    pool = add_pool("frac2")
    response = browser(owner).post(f"/pools/{pool.pk}/rescaling/", {**FORM, **change})
    assert response.status_code == 400
    (error,) = field_errors(response, field)
    assert error.startswith(message)
    assert not PoolRescaling.objects.exists()


def test_viewers_see_the_policy_without_the_form(add_pool, make_member):
    pool = add_pool("frac2")
    viewer = browser(make_member("acme", "viewer"))
    section = policy_block(viewer.get(f"/pools/{pool.pk}/"))
    assert "usage ≥ 90% of its share for 30 s" in section and "<form" not in section
    assert viewer.post(f"/pools/{pool.pk}/rescaling/", FORM).status_code == 403
    assert not PoolRescaling.objects.exists()
