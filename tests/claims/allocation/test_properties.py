"""Property-based: random claims and releases over a small random fleet never break the invariants."""

import copy
import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claims.allocation import POLICIES, Fleet, Placement, Request, Unplaceable, Workload, invariant_violations
from claims.allocation.state import MODES_FOR_KIND, SHARING_MODES

from .fleets import H100_MIG, node

MODELS = ("H100", "A100")


@st.composite
def fleets(draw):
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.integers(1, 4))
        mode = draw(st.sampled_from(SHARING_MODES))
        shares = mode in ("time-slicing", "mps", "fractional")  # may oversubscribe compute ceilings
        n = node(
            f"n{i}",
            mode=mode,
            gpus=gpus,
            model=draw(st.sampled_from(MODELS)),
            cpu=draw(st.sampled_from([16_000, 64_000])),
            memory=draw(st.sampled_from([65_536, 262_144])),
            domains=draw(st.lists(st.sampled_from(["", "a", "b"]), min_size=gpus, max_size=gpus)),
            gpu_memory=draw(st.sampled_from([16_384, 81_920])),
            schedulable=draw(st.integers(0, 9)) > 0,  # mostly schedulable
            ceiling_budget=draw(st.sampled_from([1000, 2000, 4000])) if shares else 1000,
            default_guarantee=draw(st.sampled_from([None, 100, 300])) if shares else None,
        )
        for g in n.gpus:
            g.healthy = draw(st.integers(0, 9)) > 0  # mostly healthy
        nodes.append(n)
    return nodes


# Mostly small host needs and no model constraint, so that claims pile up on the same GPUs.
host = {
    "cpu_milli": st.sampled_from([0, 0, 1_000, 1_000, 4_000, 12_000]),
    "host_memory_mib": st.sampled_from([0, 0, 4_096, 32_768]),
    "allowed_models": st.sampled_from([frozenset()] * 4 + [frozenset({"H100"}), frozenset({"A100", "T4"})]),
}
fractions = st.builds(
    Request,
    kind=st.just("fraction"),
    compute_milli=st.sampled_from([0, 100, 250, 500, 900]),
    memory_mib=st.sampled_from([1_024, 4_096, 8_192, 20_000]),
    **host,
)
# Some fractions name their guaranteed share (a fraction of their ceiling), the rest leave it to the pool.
fractions = st.one_of(
    fractions,
    st.builds(
        lambda r, part: Request(
            "fraction",
            compute_milli=r.compute_milli,
            guaranteed_milli=r.compute_milli * part // 4,
            memory_mib=r.memory_mib,
            cpu_milli=r.cpu_milli,
            host_memory_mib=r.host_memory_mib,
            allowed_models=r.allowed_models,
        ),
        fractions,
        st.integers(0, 4),
    ),
)
migs = st.builds(
    Request, kind=st.just("mig"), mig_profile=st.sampled_from([p.name for p in H100_MIG]), **host
)
wholes = st.builds(
    Request, kind=st.just("whole"), gpus=st.integers(1, 3), nvlink_required=st.booleans(), **host
)
requests = st.one_of(
    fractions, fractions, migs, migs, wholes, st.builds(Request, kind=st.just("cpu"), **host)
)
# ("place", request) or ("release", which earlier placement, modulo how many there are)
operations = st.lists(
    st.one_of(
        *[st.tuples(st.just("place"), requests)] * 3, st.tuples(st.just("release"), st.integers(0, 50))
    ),
    min_size=10,
    max_size=60,
)


def assert_sound(nodes):
    """The invariants, checked independently of the core's own helpers."""
    assert invariant_violations(nodes) == []
    for n in nodes:
        assert 0 <= n.cpu_milli_used <= n.cpu_milli_total
        assert 0 <= n.memory_mib_used <= n.memory_mib_total
        profiles = {p.name: p for p in n.mig_profiles}
        for g in n.gpus:
            assert 0 <= g.memory_used_mib <= g.memory_mib
            assert 0 <= g.compute_used <= 1000  # guaranteed shares never add up past the GPU
            assert 0 <= g.ceiling_used <= n.ceiling_budget  # ceilings within the pool's budget
            if g.exclusive:  # a whole-GPU claim's GPU holds nothing else
                assert (g.compute_used, g.memory_used_mib, g.mig_used) == (1000, g.memory_mib, [])
            slots = [0] * 8
            for s in g.mig_used:
                profile = profiles[s.profile]
                assert s.start in profile.placements and s.size == profile.memory_slices
                for k in range(s.start, s.start + s.size):
                    slots[k] += 1
            assert max(slots) <= 1  # MIG spans never overlap
            assert sum(profiles[s.profile].compute_slices for s in g.mig_used) <= 7
            names = [s.profile for s in g.mig_used]
            assert all(names.count(name) <= profiles[name].max_instances for name in names)


def check_placement(nodes, p: Placement):
    """A placement honours the claim's own constraints (the mutation invariants are checked apart)."""
    n = next(n for n in nodes if n.id == p.node_id)
    r = p.request
    assert n.schedulable
    assert n.sharing_mode in MODES_FOR_KIND[r.kind]
    assert not r.allowed_models or n.gpu_model in r.allowed_models
    assert all(n.gpus[i].healthy for i in p.gpu_indexes)
    assert len(p.gpu_indexes) == (r.gpus if r.kind != "cpu" else 0)
    if r.kind == "whole":
        assert all(n.gpus[i].idle() for i in p.gpu_indexes)
        if r.nvlink_required:
            domains = {n.gpus[i].nvlink_domain for i in p.gpu_indexes}
            assert len(domains) == 1 and "" not in domains
    if r.kind == "mig":
        assert p.mig_start in n.profile(r.mig_profile).placements
    if r.kind == "fraction":
        assert p.compute_milli == r.compute_milli and p.guaranteed_milli <= p.compute_milli
        expected = r.guaranteed_milli
        if expected is None:
            expected = (
                r.compute_milli if n.default_guarantee is None else min(r.compute_milli, n.default_guarantee)
            )
        assert p.guaranteed_milli == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=fleets(), ops=operations, policy=st.sampled_from(POLICIES), learn=st.booleans())
def test_claims_and_releases_keep_the_invariants(nodes, ops, policy, learn):
    fleet = Fleet(nodes)
    workload = Workload(refresh_every=1) if learn else None
    live: list[Placement] = []
    for op, arg in ops:
        if op == "place":
            if workload is not None:
                workload.record(arg)
            result = fleet.place(arg, policy, workload)
            # The incremental index answers like a fleet built from scratch (feasibility and reasons).
            fresh = Fleet(copy.deepcopy(nodes)).place(arg, policy, workload)
            assert isinstance(result, Placement) == isinstance(fresh, Placement)
            if isinstance(result, Unplaceable):
                assert result.reason == fresh.reason
                continue
            check_placement(nodes, result)
            before = copy.deepcopy(nodes)
            fleet.apply(result)
            assert_sound(nodes)
            # release returns the state exactly to before; then keep the claim for later
            fleet.release(result)
            assert nodes == before
            fleet.apply(result)
            live.append(result)
        elif live:
            fleet.release(live.pop(arg % len(live)))
            assert_sound(nodes)
    for p in live:
        fleet.release(p)
    assert all(
        n.cpu_milli_used == 0
        and n.memory_mib_used == 0
        and all(
            g.compute_used == g.ceiling_used == g.memory_used_mib == 0 and not g.exclusive and not g.mig_used
            for g in n.gpus
        )
        for n in nodes
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=fleets(), claims=st.lists(requests, min_size=5, max_size=40), policy=st.sampled_from(POLICIES))
def test_applying_a_placement_indexes_the_node_as_reading_it_afresh(nodes, claims, policy):
    # apply() derives the node's new interned state from its old one and what the placement took, instead
    # of re-reading the node: for the placement just proposed, and for one another process placed (as
    # the allocation log hands it over) on its own copy of the fleet. It must land on exactly the state
    # (and GPU order) that reading the node gives.
    fleet, replica = Fleet(nodes), Fleet(copy.deepcopy(nodes))
    for i, claim in enumerate(claims):
        result = fleet.place(claim, policy)
        if isinstance(result, Placement):
            fleet.apply(result)
            replica.apply(dataclasses.replace(result))
            for f in (fleet, replica):
                node = f.node(result.node_id)
                assert f._state[f._position[node.id]] == f.cache.interner.signature(node)
            if i % 3 == 2:  # a release now and then: states are read afresh, then advanced again
                fleet.release(result)
                replica.release(result)
