"""Dynamic rescaling of fractional claims on sustained pressure.

A claim whose usage (in % of its compute share) stays at or above its pool's pressure threshold for
the pool's pressure_s grows, up to the pool's max_growth_percent of its request: in place when its GPU
has compute headroom, else it moves (through the allocator) to a GPU where the grown share fits, else
it is marked throttled with the reason. A grown claim idle for the pool's idle_s shrinks back to its
request. A shorter spike changes nothing: any sample below the threshold ends the stretch
(telemetry.store). Times are the samples' own times. Claims of a pool whose policy is disabled never
grow and are never throttled; one grown before still shrinks back when idle. Policies: telemetry.policy
(a pool without one follows the platform defaults).

Contention: compute ceilings on one GPU may add up past 100% (nodepools.sharing). When the claims on a
GPU together use more than all of it (each claim's usage times its ceiling), guaranteed shares win: the
claims running above their guaranteed share are throttled first, their ceilings lowered (never below
their guarantee) until the demand fits, each giving up a part of its use above its guarantee in
proportion; none grows on a GPU that is fully used. A throttled claim gets its ceiling back when its GPU
is no longer contended."""

import math
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F

from claims import allocator
from claims.models import Claim
from nodepools.models import Gpu

from . import events, store
from .models import ClaimScaling, TelemetryEvent
from .policy import Policy, default, for_pools

GROWTH_STEP = 0.5  # each step adds half the request (the most it reaches: its pool's max_growth_percent)


@dataclass(frozen=True)
class RescaleDecision:
    claim_id: int
    action: str  # "grow" or "shrink"


def decide(
    states: dict[int, dict[str, float]], grown: set[int], policies: dict[int, Policy] | None = None
) -> list[RescaleDecision]:
    """Pure: which claims act now, from their usage state (see store._track_claim) and the policy of
    each claim's pool (`policies`: claim id → policy; a claim not in it follows the defaults)."""
    policies = policies or {}
    defaults = default()
    decisions = []
    for claim_id, state in sorted(states.items()):
        policy = policies.get(claim_id, defaults)
        ts = state.get("ts", 0.0)
        if "over_since" in state and ts - state["over_since"] >= policy.pressure_s:
            if policy.enabled:  # a disabled pool's claims never grow (nor are throttled)
                decisions.append(RescaleDecision(claim_id, "grow"))
        elif claim_id in grown and "idle_since" in state and ts - state["idle_since"] >= policy.idle_s:
            decisions.append(RescaleDecision(claim_id, "shrink"))  # disabled or not: a grown claim gives back
    return decisions


@dataclass(frozen=True)
class Share:
    """One claim on a GPU as the contention check sees it (percentages of the GPU)."""

    claim_id: int
    usage: float  # % of its ceiling, from telemetry
    ceiling: int
    guaranteed: int

    @property
    def demand(self) -> float:
        return self.usage * self.ceiling / 100


def throttle_plan(shares: list[Share]) -> dict[int, int]:
    """Pure: the lowered ceilings (claim id → %) that bring the GPU's demand within 100%, taken from the
    claims running above their guaranteed share in proportion to how far above it they run; never below a
    guarantee. Empty when the GPU is not contended. Guarantees add up to at most 100%, so there is always
    enough above them to give up."""
    total = sum(s.demand for s in shares)
    above = {s.claim_id: s.demand - s.guaranteed for s in shares if s.demand > s.guaranteed}
    if total <= 100 or not above:
        return {}
    excess, room = total - 100, sum(above.values())
    plan = {}
    for s in shares:
        if s.claim_id in above:
            ceiling = max(s.guaranteed, math.floor(s.demand - excess * above[s.claim_id] / room))
            if ceiling < s.ceiling:
                plan[s.claim_id] = ceiling
    return plan


def _requested(claim: Claim) -> int:
    """The compute share the claim asked for: its scaling row's, or, never resized, its own."""
    row = ClaimScaling.objects.filter(claim=claim).values_list("requested_compute_percent", flat=True)
    return row.first() or claim.compute_percent


def _scaling(claim: Claim) -> ClaimScaling:
    scaling, _ = ClaimScaling.objects.get_or_create(
        claim=claim,
        defaults={"tenant_id": claim.tenant_id, "requested_compute_percent": claim.compute_percent},
    )
    return scaling


def _set_state(claim: Claim, scaling: ClaimScaling, state: str, kind: str, message: str) -> None:
    scaling.state, scaling.reason = state, message if state == ClaimScaling.State.THROTTLED else ""
    scaling.save(update_fields=["state", "reason", "updated_at"])
    events.record(kind, tenant_id=claim.tenant_id, cluster_id=claim.cluster_id, claim=claim, message=message)


def grow(claim: Claim, max_growth_percent: int | None = None) -> str:
    """Grow the claim's compute share one step, to at most `max_growth_percent` of its request (its
    pool's policy; the default when None); returns the event kind recorded ("" if the claim is gone or
    no longer placed). The allocator decides the step on the claim as it stands under its lock and
    resizes it in place or moves it; the lock is held until this commits."""
    if max_growth_percent is None:
        max_growth_percent = default().max_growth_percent

    def one_step(current: Claim) -> int | None:  # None: at its limit (a lower limit never shrinks it)
        requested = _requested(current)
        step = max(1, round(requested * GROWTH_STEP))
        target = min(100, requested * max_growth_percent // 100, current.compute_percent + step)
        return target if target > current.compute_percent else None

    with transaction.atomic():
        resized = allocator.resize_claim(claim.pk, compute_percent=one_step)
        if resized is None:
            return ""
        claim, scaling = resized.claim, _scaling(resized.claim)
        before = Gpu.objects.get(pk=resized.gpu_before)
        if resized.asked is None:
            return _throttle(
                claim, scaling, f"Claim {claim} is at its limit of {claim.compute_percent}% compute."
            )
        target = resized.asked
        if resized.refusal:
            message = (
                f"Claim {claim} needs {target}% compute; {before} is full and no GPU fits: {resized.refusal}"
            )
            return _throttle(claim, scaling, message)
        if resized.moved:
            after = Gpu.objects.get(pk=resized.gpu_after)
            message = f"Claim {claim} moved from {before} to {after} with {target}% compute."
            kind = TelemetryEvent.Kind.MOVED
        else:
            message = f"Claim {claim} grew from {claim.compute_percent}% to {target}% compute on {before}."
            kind = TelemetryEvent.Kind.GROWN
        _set_state(claim, scaling, ClaimScaling.State.GROWN, kind, message)
    return kind


def _throttle(claim: Claim, scaling: ClaimScaling, message: str) -> str:
    if scaling.state != ClaimScaling.State.THROTTLED or scaling.reason != message:  # one event per cause
        _set_state(claim, scaling, ClaimScaling.State.THROTTLED, TelemetryEvent.Kind.THROTTLED, message)
    return TelemetryEvent.Kind.THROTTLED


def throttle_for_contention(claim: Claim, ceiling: int, gpu_demand: float, share: Share) -> str:
    """Lower the claim's ceiling to `ceiling` (in place: a smaller share always fits) because its GPU is
    contended; returns the event kind recorded, "" if nothing changed."""
    with transaction.atomic():
        lowered = allocator.resize_claim(claim.pk, compute_percent=lambda c: min(c.compute_percent, ceiling))
        if lowered is None or not lowered.changed:
            return ""
        claim = lowered.claim
        gpu = Gpu.objects.get(pk=lowered.gpu_before)
        message = (
            f"{gpu} is contended: its claims want {gpu_demand:.0f}% of it. Guaranteed shares win, so claim "
            f"{claim} (using {share.demand:.0f}%, guaranteed {share.guaranteed}%) is held to {ceiling}% "
            f"compute until the contention ends."
        )
        scaling = _scaling(claim)
        _set_state(claim, scaling, ClaimScaling.State.THROTTLED, TelemetryEvent.Kind.THROTTLED, message)
    return TelemetryEvent.Kind.THROTTLED


def restore(claim: Claim) -> str:
    """Give a claim throttled for contention its ceiling back (its request), in place when its GPU's
    ceiling budget has room; "" if nothing changed."""

    def back(current: Claim) -> int | None:
        requested = _requested(current)
        return requested if current.compute_percent < requested else None

    with transaction.atomic():
        resized = allocator.resize_claim(claim.pk, compute_percent=back)
        if resized is None or not resized.changed or resized.moved or resized.refusal:
            return ""
        claim = resized.claim
        message = (
            f"Claim {claim}'s GPU is no longer contended: back from {claim.compute_percent}% to its request, "
            f"{resized.compute_percent}%."
        )
        _set_state(claim, _scaling(claim), ClaimScaling.State.NORMAL, TelemetryEvent.Kind.GROWN, message)
    return TelemetryEvent.Kind.GROWN


def shrink(claim: Claim) -> str:
    """Back to the request, in place (a smaller share always fits where the bigger one was)."""

    def back(current: Claim) -> int | None:
        requested = _requested(current)
        return requested if current.compute_percent > requested else None

    with transaction.atomic():
        resized = allocator.resize_claim(claim.pk, compute_percent=back)
        if resized is None or not resized.changed:
            return ""
        claim, requested = resized.claim, resized.compute_percent
        message = f"Claim {claim} was idle: back from {claim.compute_percent}% to its request, {requested}%."
        _set_state(claim, _scaling(claim), ClaimScaling.State.NORMAL, TelemetryEvent.Kind.SHRUNK, message)
    return TelemetryEvent.Kind.SHRUNK


def rescale() -> list[tuple[int, str]]:
    """One pass over the allocated fractional claims with a compute share. Returns (claim, event kind)."""
    claims = {
        c.pk: c
        for c in Claim.objects.filter(
            kind=Claim.Kind.FRACTION, status=Claim.Status.ALLOCATED, compute_percent__isnull=False
        )
        .select_related("pool")
        .annotate(
            placed_pool_id=F("allocation__node__pool_id"),  # `pool` is only where it asked to go
            gpu_id=F("allocation__shares__gpu_id"),  # a fraction has one share
            guaranteed_milli=F("allocation__shares__guaranteed_milli"),
        )
    }
    states = store.claim_states(list(claims))
    pool_policies = for_pools(claims[pk].placed_pool_id for pk in states)
    policies = {pk: pool_policies[claims[pk].placed_pool_id] for pk in states}
    requested = dict(
        ClaimScaling.objects.filter(claim_id__in=states).values_list("claim_id", "requested_compute_percent")
    )
    grown = {pk for pk, percent in requested.items() if claims[pk].compute_percent > percent}
    done, acted = _contention(claims, states, requested, policies)
    for decision in decide(states, grown, policies):
        claim = claims[decision.claim_id]
        if claim.pk in acted:
            continue
        if decision.action == "grow":
            kind = grow(claim, policies[claim.pk].max_growth_percent)
        else:
            kind = shrink(claim)
        store.reset_claim(claim.pk)  # the next decision needs a new stretch of pressure (or idleness)
        if kind:
            done.append((claim.pk, kind))
    # A throttled claim whose pressure has ended, or whose pool no longer grows claims, is no longer
    # throttled.
    relieved = [pk for pk, state in states.items() if "over_since" not in state or not policies[pk].enabled]
    ClaimScaling.objects.filter(claim_id__in=relieved, state=ClaimScaling.State.THROTTLED).update(
        state=ClaimScaling.State.NORMAL, reason=""
    )
    return done


def _contention(
    claims: dict[int, Claim],
    states: dict[int, dict[str, float]],
    requested: dict[int, int],
    policies: dict[int, Policy],
) -> tuple[list[tuple[int, str]], set[int]]:
    """Throttle the claims of contended GPUs (guaranteed shares win) and give throttled claims of quiet
    GPUs their ceilings back. Returns what was done and the claims that make no other decision in this
    pass: those acted on, and every claim of a fully used GPU (none grows there)."""
    on_gpu: dict[int, list[Share]] = {}
    for pk, state in states.items():
        claim = claims[pk]
        share = Share(pk, state.get("usage", 0.0), claim.compute_percent, (claim.guaranteed_milli or 0) // 10)
        on_gpu.setdefault(claim.gpu_id, []).append(share)
    done, held = [], set()
    for shares in on_gpu.values():
        demand = sum(s.demand for s in shares)
        plan = {pk: c for pk, c in throttle_plan(shares).items() if policies[pk].enabled}
        for share in shares:
            claim, kind = claims[share.claim_id], ""
            if share.claim_id in plan:
                kind = throttle_for_contention(claim, plan[share.claim_id], demand, share)
            elif demand < 100 and claim.compute_percent < requested.get(claim.pk, claim.compute_percent):
                kind = restore(claim)
            if kind:
                store.reset_claim(share.claim_id)
                done.append((share.claim_id, kind))
            if kind or demand >= 100:
                held.add(share.claim_id)
    return done, held
