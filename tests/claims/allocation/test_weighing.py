"""Weighing victims fast decides exactly as before: `Fleet.lift`/`put_back` against `release`/`apply`
(the old way, kept here as the oracle) on random fleets; refusal counts brought up to date by net change
against a fleet read afresh; and what the fast ways no longer do."""

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claims.allocation import Fleet, Placement, PlacementCache, Request, Unplaceable, Workload
from claims.allocation import fleet as fleet_module
from claims.allocation.keys import Interner
from claims.allocation.preemption import Victim, choose_victims

from .fleets import node
from .test_properties import fleets, requests


def _place_all(f: Fleet, claims: list[Request], workload: Workload) -> list:
    """Each claim placed where FGD puts it (and applied), or its refusal text and counts."""
    out: list = []
    for claim in claims:
        result = f.place(claim, "fgd", workload)
        if isinstance(result, Placement):
            f.apply(result)
            out.append(result)
        else:
            out.append((result.reason, dict(result.counts)))
    return out


def _weigh(f: Fleet, victims: dict[Victim, Placement], claim: Request, lifting: bool) -> list[Victim] | None:
    """choose_victims as bench/gang_replay.py and the service call it: each node's victims alone."""
    lift, put_back = (f.lift, f.put_back) if lifting else (f.release, f.apply)
    return choose_victims(
        list(victims),
        lambda: isinstance(f.place(claim), Placement),
        lambda v: lift(victims[v]),
        lambda v: put_back(victims[v]),
        domains=lambda v: {victims[v].node_id},
        fits_in=lambda n: f.place_on(n, claim) is not None,
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=fleets(),
    placed=st.lists(requests, min_size=3, max_size=30),
    preemptors=st.lists(requests, min_size=1, max_size=4),
    after=st.lists(requests, min_size=1, max_size=15),
)
def test_lifting_weighs_and_then_places_exactly_as_releasing(nodes, placed, preemptors, after):
    workload = Workload(placed + after)
    old, new = Fleet(copy.deepcopy(nodes), PlacementCache()), Fleet(nodes, PlacementCache())
    first = _place_all(old, placed, workload)
    assert _place_all(new, placed, workload) == first
    victims = {
        Victim((k,), len(p.gpu_indexes), k % 2, float(k)): p
        for k, p in enumerate(first)
        if isinstance(p, Placement)
    }
    for claim in preemptors * 2:  # twice: the second time, lifting answers from what it kept
        assert _weigh(new, victims, claim, lifting=True) == _weigh(old, victims, claim, lifting=False)
        # The indexes alike after: the same states, interned in the same order, the same log.
        assert (new.version, new.distinct_states) == (old.version, old.distinct_states)
        assert [new.state_of(n.id) for n in nodes] == [old.state_of(n.id) for n in nodes]
    # Ties between equal nodes and equal scores follow the history of the states: so the decisions
    # after weighing are the same too, placements and refusal texts.
    assert _place_all(new, after, workload) == _place_all(old, after, workload)


class CountingInterner(Interner):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def signature(self, node):
        self.reads += 1
        return super().signature(node)


def test_lifting_the_same_victims_again_reads_no_node():
    cache = PlacementCache()
    cache.interner = interner = CountingInterner()
    f = Fleet([node("a", gpus=4), node("b", gpus=4)], cache)
    placements = []
    for _ in range(6):
        p = f.place(Request("fraction", compute_milli=300, cpu_milli=1000), "binpack")
        f.apply(p)
        placements.append(p)
    before = f.state_of("a"), f.state_of("b")
    for round_ in range(2):
        reads = interner.reads
        for p in placements:
            f.lift(p)
        for p in reversed(placements):
            f.put_back(p)
        # The first time each state lifting leads to is read from a copy of the node; then kept.
        assert (interner.reads - reads > 0) == (round_ == 0)
        assert (f.state_of("a"), f.state_of("b")) == before
    assert f.place(Request("whole", gpus=4), "binpack").node_id == "b"  # "a" holds all six


def test_a_refusal_after_many_round_trips_asks_only_the_states_that_changed(monkeypatch):
    # One node with a small claim on its only GPU: a whole-GPU claim is refused. Then the small claim
    # is released and applied again 500 times (as weighing victims did), and one more fraction lands.
    f = Fleet([node("a", gpus=1), node("b", gpus=1, mode="mig")])
    small = f.place(Request("fraction", compute_milli=100))
    f.apply(small)
    whole = Request("whole", gpus=1)
    assert str(f.place(whole)) == "0/2 nodes: 1 not enough free GPUs, 1 wrong sharing mode"
    for _ in range(500):
        f.release(small)
        f.apply(small)
    f.apply(f.place(Request("fraction", compute_milli=100)))
    asked = []
    counting = fleet_module.candidates
    monkeypatch.setattr(fleet_module, "candidates", lambda *args: asked.append(args[1]) or counting(*args))
    refused = f.place(whole)
    assert isinstance(refused, Unplaceable)
    assert str(refused) == "0/2 nodes: 1 not enough free GPUs, 1 wrong sharing mode"
    # Only the state the last fraction led to; the round trips' states cancel out (one of them fits
    # the claim, so it was asked again at every move).
    assert asked == [f._state[0][0]]
