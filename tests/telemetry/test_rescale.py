"""Rescaling: sustained pressure grows a claim (in place, else by moving it, else it is throttled);
a 10 s spike changes nothing; a claim idle for long shrinks back to its request."""

import time

import pytest
from django.test import Client, override_settings

from claims.models import Claim, GpuShare
from telemetry import rescale
from telemetry.models import ClaimScaling, TelemetryEvent

from .conftest import client_of_node, gpu_of, post, sample

pytestmark = pytest.mark.django_db


def report(claim, usages: list[float], start: float, step_s: float = 1.0) -> None:
    """The claim's node reports one sample a second with the claim's usage (% of its share)."""
    gpu = gpu_of(claim)
    samples = [sample(gpu, start + i * step_s, claims={claim.pk: u}) for i, u in enumerate(usages)]
    assert post(client_of_node(gpu.node), samples).status_code == 202


def compute_of(claim) -> int:
    return GpuShare.objects.get(allocation__claim=claim).compute_milli // 10


def test_sustained_pressure_grows_in_place(add_pool, claim_in, api):
    add_pool("only")
    claim = claim_in("infer", 40)
    gpu = gpu_of(claim)
    report(claim, [95] * 31, time.time() - 40)  # 30 s above the threshold

    assert rescale.rescale() == [(claim.pk, "claim.grown")]
    claim.refresh_from_db()
    assert (claim.compute_percent, compute_of(claim), gpu_of(claim)) == (60, 60, gpu)
    scaling = ClaimScaling.objects.get(claim=claim)
    assert (scaling.state, scaling.requested_compute_percent) == ("grown", 40)
    assert rescale.rescale() == []  # the stretch starts again after a decision
    (event,) = api.get(f"/api/v1/telemetry/events/?claim={claim.pk}").data["results"]
    assert event["kind"] == "claim.grown" and "40% to 60%" in event["message"]


@pytest.mark.parametrize(
    "usages",
    [
        [50] * 20 + [99] * 10 + [50] * 10,  # a 10 s spike, over
        [50] * 30 + [99] * 10,  # a 10 s spike, still on
        [99] * 10 + [50] + [99] * 10 + [50] + [99] * 10,  # spikes, never 30 s in a row
    ],
)
def test_short_spikes_change_nothing(add_pool, claim_in, usages):
    add_pool("only")
    claim = claim_in("infer", 40)
    report(claim, usages, time.time() - 45)
    assert rescale.rescale() == []
    claim.refresh_from_db()
    assert (claim.compute_percent, compute_of(claim)) == (40, 40)
    assert not TelemetryEvent.objects.exists()


def test_no_headroom_moves_the_claim_to_a_gpu_that_fits(add_pool, claim_in):
    add_pool("first")
    claim, neighbour = claim_in("infer", 40), claim_in("neighbour", 60)
    full = gpu_of(claim)
    assert gpu_of(neighbour) == full
    spare = add_pool("spare")
    report(claim, [95] * 31, time.time() - 40)

    assert rescale.rescale() == [(claim.pk, "claim.moved")]
    claim.refresh_from_db()
    assert claim.status == Claim.Status.ALLOCATED
    assert gpu_of(claim).node.pool == spare and compute_of(claim) == 60
    assert gpu_of(neighbour) == full and compute_of(neighbour) == 60  # the neighbour is untouched


def test_nowhere_to_grow_is_throttled_with_the_reason(add_pool, claim_in, api):
    add_pool("only")
    claim, neighbour = claim_in("infer", 40), claim_in("neighbour", 60)
    report(claim, [95] * 31, time.time() - 70)
    assert rescale.rescale() == [(claim.pk, "claim.throttled")]
    claim.refresh_from_db()
    assert (claim.compute_percent, compute_of(claim), compute_of(neighbour)) == (40, 40, 60)
    scaling = api.get("/api/v1/telemetry/claim-scaling/?state=throttled").data["results"][0]
    assert scaling["claim"] == claim.pk and "needs 60% compute" in scaling["reason"]
    # Still under pressure, same cause: no second event.
    report(claim, [95] * 31, time.time() - 35)
    assert rescale.rescale() == [(claim.pk, "claim.throttled")]
    assert TelemetryEvent.objects.filter(kind="claim.throttled").count() == 1
    # The pressure ends: no longer throttled.
    report(claim, [50] * 3, time.time() - 3)
    assert rescale.rescale() == []
    assert ClaimScaling.objects.get(claim=claim).state == "normal"


@override_settings(TELEMETRY_IDLE_S=60)
def test_idle_grown_claim_shrinks_back_to_its_request(add_pool, claim_in):
    add_pool("only")
    claim = claim_in("infer", 40)
    start = time.time() - 200
    report(claim, [95] * 31, start)
    assert rescale.rescale() == [(claim.pk, "claim.grown")]
    report(claim, [5] * 61, start + 40)
    assert rescale.rescale() == [(claim.pk, "claim.shrunk")]
    claim.refresh_from_db()
    assert (claim.compute_percent, compute_of(claim)) == (40, 40)
    assert ClaimScaling.objects.get(claim=claim).state == "normal"


def test_profile_is_set_through_the_api_for_own_fractional_claims(
    add_pool, claim_in, api, make_member, client_for
):
    add_pool("only")
    claim = claim_in("infer", 40)
    response = api.post("/api/v1/telemetry/claim-scaling/", {"claim": claim.pk, "profile": "growing"})
    assert response.status_code == 201, response.data
    assert (response.data["profile"], response.data["requested_compute_percent"]) == ("growing", 40)
    bad = api.post("/api/v1/telemetry/claim-scaling/", {"claim": claim.pk, "profile": "wild"})
    assert bad.status_code == 400 and "profile" in bad.data["details"]["fields"]
    stranger = client_for(make_member("globex", "owner"))
    assert stranger.post("/api/v1/telemetry/claim-scaling/", {"claim": claim.pk}).status_code == 400
    assert stranger.get(f"/api/v1/telemetry/claim-scaling/{response.data['id']}/").status_code == 404


def claim_page(owner, claim) -> str:
    browser = Client()
    browser.force_login(owner)
    response = browser.get(f"/claims/{claim.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_claims_page_says_it_grew_and_keeps_showing_its_request(add_pool, claim_in, owner):
    add_pool("only")
    claim = claim_in("infer", 40)
    assert "It holds what it asked for" in claim_page(owner, claim)
    report(claim, [95] * 31, time.time() - 40)
    assert rescale.rescale() == [(claim.pk, "claim.grown")]

    page = claim_page(owner, claim)
    assert "it holds 60% compute and asked for 40%" in page
    assert "<dt>Compute</dt><dd>40%</dd>" in page  # what it asks for is the request, not the grown share
    assert "claim.grown</strong> Claim default/infer grew from 40% to 60% compute" in page


def test_a_claims_page_says_why_it_is_throttled(add_pool, claim_in, owner):
    add_pool("only")
    claim, _ = claim_in("infer", 40), claim_in("neighbour", 60)
    report(claim, [95] * 31, time.time() - 40)
    assert rescale.rescale() == [(claim.pk, "claim.throttled")]
    page = claim_page(owner, claim)
    assert "<strong>Throttled:</strong>" in page and "needs 60% compute" in page


# --- contention: guaranteed shares win ---------------------------------------------------------------


def test_throttle_plan_takes_from_those_above_their_guarantee():
    shares = [
        rescale.Share(1, usage=100, ceiling=70, guaranteed=10),  # wants 70, 60 above its guarantee
        rescale.Share(2, usage=100, ceiling=60, guaranteed=50),  # wants 60, 10 above
        rescale.Share(3, usage=50, ceiling=20, guaranteed=20),  # wants 10, within its guarantee
    ]
    plan = rescale.throttle_plan(shares)
    assert set(plan) == {1, 2}  # the claim within its guarantee is left alone
    assert plan[1] >= 10 and plan[2] >= 50  # never below a guarantee
    assert plan[1] + plan[2] + 10 <= 100  # the demand fits the GPU
    assert 70 - plan[1] > 60 - plan[2]  # who runs further above its guarantee gives up more
    assert rescale.throttle_plan([rescale.Share(1, 90, 50, 10), rescale.Share(2, 90, 50, 10)]) == {}


def test_a_contended_gpu_throttles_claims_above_their_guarantee_then_restores_them(add_pool, claim_in, api):
    pool = add_pool("shared", sharing_mode="time-slicing", compute_oversubscription_percent=200)
    train = claim_in("train", 70, guaranteed_percent=10)
    service = claim_in("service", 60, guaranteed_percent=50)
    assert gpu_of(train) == gpu_of(service)
    start = time.time() - 5
    report(train, [100] * 3, start)
    report(service, [100] * 3, start)

    done = dict(rescale.rescale())
    assert done == {train.pk: "claim.throttled", service.pk: "claim.throttled"}
    lowered = {c.name: compute_of(c) for c in (train, service)}
    assert lowered["train"] >= 10 and lowered["service"] >= 50
    assert lowered["train"] + lowered["service"] <= 100
    assert 70 - lowered["train"] > 60 - lowered["service"]
    scaling = ClaimScaling.objects.get(claim=train)
    assert scaling.state == "throttled" and "Guaranteed shares win" in scaling.reason
    assert "wants 130%" in scaling.reason or "want 130%" in scaling.reason
    assert pool.compute_oversubscription_percent == 200

    # The contention ends: both get their ceilings back.
    report(train, [20] * 3, start + 3)
    report(service, [20] * 3, start + 3)
    assert dict(rescale.rescale()) == {train.pk: "claim.grown", service.pk: "claim.grown"}
    assert (compute_of(train), compute_of(service)) == (70, 60)
    assert ClaimScaling.objects.get(claim=train).state == "normal"
    events = api.get(f"/api/v1/telemetry/events/?claim={train.pk}").data["results"]
    assert any("no longer contended" in e["message"] for e in events)
