"""Placement rules of the pure allocator core, table-driven."""

import copy

import pytest

from claims.allocation import (
    POLICIES,
    Fleet,
    Placement,
    Profile,
    Request,
    Unplaceable,
    Workload,
    apply,
    empty_fleet,
    fits_ever,
    invariant_violations,
    place,
    release,
)
from claims.allocation.state import MigSlice

from .fleets import node


def used(n, gpu, compute=0, memory=0, exclusive=False, mig=(), ceiling=None):
    """Mark GPU `gpu` of node `n` in use (returns the node, for building fleets inline). Fractions'
    ceilings add up to `ceiling` (default: their guaranteed `compute`, as with request = limit)."""
    g = n.gpus[gpu]
    g.compute_used, g.memory_used_mib, g.exclusive, g.mig_used = compute, memory, exclusive, list(mig)
    g.ceiling_used = (
        n.ceiling_budget if exclusive else compute if ceiling is None and not mig else ceiling or 0
    )
    return n


def sick(n, *indexes):
    for i in indexes:
        n.gpus[i].healthy = False
    return n


def whole(gpus=1, **kw):
    return Request("whole", gpus=gpus, **kw)


def frac(compute=0, memory=0, **kw):
    return Request("fraction", compute_milli=compute, memory_mib=memory, **kw)


def mig(profile, **kw):
    return Request("mig", mig_profile=profile, **kw)


# (case, fleet, request, expected): expected is {node: GPU indexes} for a placement, or the exact reason.
CASES = [
    # --- whole GPUs
    (
        "nvlink required: the two GPUs of one domain",
        lambda: [
            node("pcie", mode="exclusive", gpus=4),
            node("nv", mode="exclusive", gpus=4, domains=["a", "b", "a", "b"]),
        ],
        whole(2, nvlink_required=True),
        {"nv": (0, 2)},
    ),
    (
        "nvlink required and no domain has two idle GPUs",
        lambda: [node("n", mode="exclusive", gpus=4, domains=["a", "b", "c", "d"])],
        whole(2, nvlink_required=True),
        "0/1 nodes: 1 no NVLink-connected set",
    ),
    (
        "nvlink preferred when not required: the NVLink node over the PCIe node",
        lambda: [
            node("pcie", mode="exclusive", gpus=4),
            node("nv", mode="exclusive", gpus=4, domains=["a", "a", "b", "b"]),
        ],
        whole(2),
        {"nv": (0, 1)},
    ),
    (
        "NVLink domain with the fewest idle GPUs first (keeps the big set)",
        lambda: [node("nv", mode="exclusive", gpus=6, domains=["a", "a", "a", "a", "b", "b"])],
        whole(2, nvlink_required=True),
        {"nv": (4, 5)},
    ),
    (
        "without a connected set, any idle GPUs when not required",
        lambda: [node("n", mode="exclusive", gpus=4, domains=["a", "b", "c", "d"])],
        whole(2),
        {"n": None},
    ),
    (
        "not enough GPUs on any node",
        lambda: [node("a", mode="exclusive", gpus=2), node("b", mode="exclusive", gpus=2)],
        whole(3),
        "0/2 nodes: 2 not enough free GPUs",
    ),
    (
        "whole GPU on a sharing node takes only an idle GPU",
        lambda: [used(node("n", gpus=2), 0, compute=100)],
        whole(1),
        {"n": (1,)},
    ),
    (
        "whole GPU never on a MIG node",
        lambda: [node("m", mode="mig", gpus=1)],
        whole(1),
        "0/1 nodes: 1 wrong sharing mode",
    ),
    # --- MIG
    (
        "3g on an empty GPU starts at 4 (leaves four 1g starts, §4.9)",
        lambda: [node("m", mode="mig", gpus=1)],
        mig("3g.40gb"),
        {"m": (0,), "start": 4},
    ),
    (
        "second 3g takes start 0",
        lambda: [used(node("m", mode="mig", gpus=1), 0, mig=[MigSlice(4, 4, "3g.40gb")])],
        mig("3g.40gb"),
        {"m": (0,), "start": 0},
    ),
    (
        "no third 3g",
        lambda: [
            used(node("m", mode="mig", gpus=1), 0, mig=[MigSlice(0, 4, "3g.40gb"), MigSlice(4, 4, "3g.40gb")])
        ],
        mig("3g.40gb"),
        "0/1 nodes: 1 no free MIG placement",
    ),
    (
        "1g next to a 3g goes to a free slot left of it",
        lambda: [used(node("m", mode="mig", gpus=1), 0, mig=[MigSlice(4, 4, "3g.40gb")])],
        mig("1g.10gb"),
        {"m": (0,), "start_in": (0, 1, 2, 3)},
    ),
    (
        "3g + four 1g is full: no fifth 1g",
        lambda: [
            used(
                node("m", mode="mig", gpus=1),
                0,
                mig=[MigSlice(4, 4, "3g.40gb")] + [MigSlice(s, 1, "1g.10gb") for s in range(4)],
            )
        ],
        mig("1g.10gb"),
        "0/1 nodes: 1 no free MIG placement",
    ),
    (
        "4g only at 0: taken by a 1g there",
        lambda: [used(node("m", mode="mig", gpus=1), 0, mig=[MigSlice(0, 1, "1g.10gb")])],
        mig("4g.40gb"),
        "0/1 nodes: 1 no free MIG placement",
    ),
    (
        "+me: one per GPU, the second goes to the other GPU",
        lambda: [used(node("m", mode="mig", gpus=2), 0, mig=[MigSlice(6, 1, "1g.10gb+me")])],
        mig("1g.10gb+me"),
        {"m": (1,)},
    ),
    (
        "+me: one per GPU, none on a one-GPU node that has it",
        lambda: [used(node("m", mode="mig", gpus=1), 0, mig=[MigSlice(6, 1, "1g.10gb+me")])],
        mig("1g.10gb+me"),
        "0/1 nodes: 1 no free MIG placement",
    ),
    (
        "three 2g and a 1g use all 7 compute slices",
        lambda: [
            used(
                node("m", mode="mig", gpus=1),
                0,
                mig=[MigSlice(0, 2, "2g.20gb"), MigSlice(2, 2, "2g.20gb"), MigSlice(4, 2, "2g.20gb")],
            )
        ],
        mig("1g.10gb"),
        {"m": (0,), "start": 6},
    ),
    (
        "MIG profile the pool does not offer",
        lambda: [node("m", mode="mig", gpus=1)],
        mig("5g.50gb"),
        "0/1 nodes: 1 MIG profile not offered",
    ),
    (
        "MIG claim on a fractional node",
        lambda: [node("f", gpus=1)],
        mig("1g.10gb"),
        "0/1 nodes: 1 wrong sharing mode",
    ),
    # --- fractions
    (
        "GPU memory cap: the GPU with room",
        lambda: [used(node("n", gpus=2), 0, memory=70_000)],
        frac(memory=20_000),
        {"n": (1,)},
    ),
    (
        "GPU memory cap: no GPU has room",
        lambda: [used(used(node("n", gpus=2), 0, memory=70_000), 1, memory=70_000)],
        frac(memory=20_000),
        "0/1 nodes: 1 insufficient GPU memory",
    ),
    (
        "compute cap",
        lambda: [used(used(node("n", gpus=2), 0, compute=800), 1, compute=900)],
        frac(compute=300),
        "0/1 nodes: 1 insufficient GPU compute",
    ),
    (
        "exclusive GPUs are skipped",
        lambda: [used(node("n", gpus=2), 0, compute=1000, memory=81920, exclusive=True)],
        frac(compute=100),
        {"n": (1,)},
    ),
    (
        "only exclusive GPUs",
        lambda: [used(node("n", gpus=1), 0, compute=1000, memory=81920, exclusive=True)],
        frac(compute=100),
        "0/1 nodes: 1 not enough free GPUs",
    ),
    (
        "fraction on an exclusive-mode node",
        lambda: [node("x", mode="exclusive")],
        frac(compute=100),
        "0/1 nodes: 1 wrong sharing mode",
    ),
    # --- node-level checks
    (
        "insufficient CPU",
        lambda: [node("n", cpu=8_000)],
        frac(compute=100, cpu_milli=10_000),
        "0/1 nodes: 1 insufficient CPU",
    ),
    (
        "insufficient host memory",
        lambda: [node("n", memory=16_384)],
        frac(compute=100, host_memory_mib=32_768),
        "0/1 nodes: 1 insufficient host memory",
    ),
    (
        "CPU is checked against what is left",
        lambda: [node("busy", cpu=64_000, cpu_milli_used=60_000), node("idle", cpu=64_000)],
        frac(compute=100, cpu_milli=10_000),
        {"idle": (0,)},
    ),
    (
        "allowed models",
        lambda: [node("h", model="H100"), node("a", model="A100")],
        frac(compute=100, allowed_models={"A100"}),
        {"a": (0,)},
    ),
    (
        "unhealthy GPUs are skipped",
        lambda: [sick(node("n", gpus=2), 0)],
        frac(compute=100),
        {"n": (1,)},
    ),
    (
        "all GPUs unhealthy",
        lambda: [sick(node("n", gpus=2), 0, 1)],
        frac(compute=100),
        "0/1 nodes: 1 GPU unhealthy",
    ),
    (
        "unschedulable node",
        lambda: [node("n", schedulable=False), node("m", mode="exclusive")],
        frac(compute=100),
        "0/2 nodes: 1 node not schedulable, 1 wrong sharing mode",
    ),
    (
        "reasons aggregate per node, most frequent first",
        lambda: [
            used(node("a", gpus=1), 0, memory=80_000),
            used(node("b", gpus=1), 0, memory=80_000),
            node("c", model="T4"),
        ],
        frac(memory=10_000, allowed_models={"H100"}),
        "0/3 nodes: 2 insufficient GPU memory, 1 GPU model not allowed",
    ),
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_placement_rules(case, policy):
    _, build, request, expected = case
    nodes = build()
    result = place(request, nodes, policy)
    if isinstance(expected, str):
        assert isinstance(result, Unplaceable)
        assert not result
        assert result.reason == expected
        return
    assert isinstance(result, Placement), result
    (node_id,) = [k for k in expected if k not in ("start", "start_in")]
    assert result.node_id == node_id
    if expected[node_id] is not None:
        assert result.gpu_indexes == expected[node_id]
    assert len(result.gpu_indexes) == request.gpus
    if "start" in expected:
        assert result.mig_start == expected["start"]
    if "start_in" in expected:
        assert result.mig_start in expected["start_in"]
    # The placement is valid: applying it breaks nothing, releasing it restores the state.
    before = copy.deepcopy(nodes)
    apply(result, nodes)
    assert invariant_violations(nodes) == []
    release(result, nodes)
    assert nodes == before


@pytest.mark.parametrize(
    ("mode", "request_", "isolation"),
    [
        ("exclusive", whole(1), "exclusive"),
        ("fractional", whole(1), "exclusive"),
        ("mig", mig("2g.20gb"), "hard"),
        ("mps", frac(memory=1024), "memory-capped"),
        ("time-slicing", frac(compute=500), "none"),
        ("fractional", frac(compute=500), "none"),
    ],
)
def test_isolation_follows_the_kind_and_sharing_mode(mode, request_, isolation):
    result = place(request_, [node("n", mode=mode, gpus=1)])
    assert isinstance(result, Placement)
    assert result.isolation == isolation


def test_mig_placement_reports_the_slice_size_memory_and_compute():
    result = place(mig("3g.40gb"), [node("m", mode="mig", gpus=1)])
    assert (result.mig_start, result.mig_size) == (4, 4)
    assert result.memory_mib == 81920 // 2
    assert result.compute_milli == 3000 // 7


def test_mig_slice_counts_its_memory_and_compute_as_used():
    nodes = [node("m", mode="mig", gpus=1)]
    p = place(mig("3g.40gb"), nodes)
    apply(p, nodes)
    gpu = nodes[0].gpus[0]
    assert (gpu.memory_used_mib, gpu.compute_used, gpu.mig_used) == (40960, 428, [MigSlice(4, 4, "3g.40gb")])
    release(p, nodes)
    assert (gpu.memory_used_mib, gpu.compute_used, gpu.mig_used) == (0, 0, [])


def test_whole_gpu_takes_the_gpu_so_nothing_else_fits():
    nodes = [node("n", gpus=1)]
    apply(place(whole(1), nodes), nodes)
    assert nodes[0].gpus[0].exclusive
    assert place(frac(compute=1), nodes).reason == "0/1 nodes: 1 not enough free GPUs"
    assert place(frac(memory=1), nodes).reason == "0/1 nodes: 1 not enough free GPUs"


def test_compute_slice_budget_on_a_tighter_geometry():
    """Slots free but compute slices spent: a made-up GPU with 4 slots and 4 compute slices."""
    profiles = [Profile("2c.1m", 2, 1, (0, 1, 2, 3), 4), Profile("full", 4, 4, (0,), 1)]
    n = node("m", mode="mig", gpus=1)
    n.mig_profiles = profiles
    nodes = [n]
    for _ in range(2):
        apply(place(mig("2c.1m"), nodes), nodes)
    assert len(n.gpus[0].mig_used) == 2  # 2 of 4 slots, 4 of 4 compute slices
    assert place(mig("2c.1m"), nodes).reason == "0/1 nodes: 1 no free MIG placement"


def test_apply_refuses_a_placement_that_no_longer_fits():
    nodes = [node("n", gpus=1)]
    p = place(frac(compute=600), nodes)
    apply(p, nodes)
    with pytest.raises(ValueError):
        apply(p, nodes)
    assert nodes[0].gpus[0].compute_used == 600  # unchanged by the refused apply


def test_release_of_what_is_not_held_is_refused():
    nodes = [node("n", gpus=1)]
    p = place(whole(1), nodes)
    with pytest.raises(ValueError):
        release(p, nodes)


# --- policies on a small hand-made fleet


def _two_nodes():
    """busy: one GPU 40% used; idle: all free."""
    return [used(node("busy", gpus=1), 0, compute=400), node("idle", gpus=1)]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("binpack", "busy"), ("spread", "idle"), ("best-fit", "busy")],
)
def test_policies_choose_differently(policy, expected):
    assert place(frac(compute=200), _two_nodes(), policy).node_id == expected


def test_fgd_keeps_room_for_the_common_shape():
    """Workload: 500-milli claims. A 200 on busy (600 free) leaves 400, useless for a 500: fragmentation
    grows by 400. On idle it leaves 800, still fine. binpack takes busy; FGD takes idle."""
    workload = Workload([frac(compute=500)] * 10)
    assert place(frac(compute=200), _two_nodes(), "binpack").node_id == "busy"
    assert place(frac(compute=200), _two_nodes(), "fgd", workload).node_id == "idle"
    # A 600 fills busy exactly: no fragment left, FGD takes it.
    assert place(frac(compute=600), _two_nodes(), "fgd", workload).node_id == "busy"


def test_fgd_whole_gpu_goes_where_sharing_claims_cannot_use_the_gpu_anyway():
    """Workload: fractions that need 20 cores. `starved` has an idle GPU but 10 cores: its GPU is stranded
    for the workload, so a CPU-light whole-GPU claim belongs there, not on `fed`."""
    workload = Workload([frac(compute=500, cpu_milli=20_000)] * 10)
    nodes = [node("fed", gpus=1, cpu=64_000), node("starved", gpus=1, cpu=10_000)]
    assert place(whole(1, cpu_milli=1_000), nodes, "fgd", workload).node_id == "starved"


def _models(a_only, a_gpus=2, b_gpus=8):
    """A node of model A and one of model B, and whole-GPU claims: 40% may run on any model, the rest
    only on A (`a_only` of 10) or only on B."""
    shapes = [whole(1)] * 4 + [whole(1, allowed_models={"A"})] * a_only
    shapes += [whole(1, allowed_models={"B"})] * (6 - a_only)
    return [node("a", gpus=a_gpus, model="A"), node("b", gpus=b_gpus, model="B")], shapes


@pytest.mark.parametrize(
    ("a_only", "a_gpus", "b_gpus", "expected"),
    [
        # A has 2 of the 10 GPUs but 30% of the claims need it: a claim that may go anywhere takes B.
        (3, 2, 8, "b"),
        # B-only claims are 60% of the workload on 80% of the GPUs, A-only none: A is free to take.
        (0, 2, 8, "a"),
        # The same reservations on equal nodes: no model is scarcer, the tighter fit (A) wins.
        (3, 4, 4, "a"),
    ],
)
def test_fgd_keeps_the_gpus_of_a_model_that_constrained_claims_need(a_only, a_gpus, b_gpus, expected):
    nodes, shapes = _models(a_only, a_gpus, b_gpus)
    assert place(whole(1), nodes, "fgd", Workload(shapes)).node_id == expected


def test_the_papers_measure_alone_spends_the_constrained_model():
    """Why the reserve is needed: without it both nodes' fragmentation falls alike (each counts the
    other model's claims as unable to use it) and the tighter fit, A, is taken."""
    nodes, shapes = _models(3)
    assert place(whole(1), nodes, "fgd", Workload(shapes, extensions=False)).node_id == "a"


def test_a_claim_allowed_two_models_takes_the_less_reserved_one():
    nodes, shapes = _models(3)
    assert place(whole(1, allowed_models={"A", "B"}), nodes, "fgd", Workload(shapes)).node_id == "b"


@pytest.mark.parametrize(
    ("big_cpu", "expected"),
    [
        # 8 GPUs and 120 cores fit whole only on B (128 cores): 40% of the claims are bound to B as if
        # they named it, so a claim that may go anywhere leaves B's GPUs, although B is the tighter fit.
        (120_000, "a"),
        # 8 GPUs and 64 cores fit on both models: nothing is reserved, the tighter fit (B) wins.
        (64_000, "b"),
    ],
)
def test_fgd_keeps_the_model_that_a_shape_fits_whole_only_on(big_cpu, expected):
    a = used(node("a", gpus=8, model="A", cpu=96_000), 0, exclusive=True)
    b = used(node("b", gpus=8, model="B", cpu=128_000), 0, exclusive=True)
    b.cpu_milli_used = 60_000
    shapes = [whole(1, cpu_milli=4_000)] * 6 + [whole(8, cpu_milli=big_cpu)] * 4
    assert place(whole(1, cpu_milli=4_000), [a, b], "fgd", Workload(shapes)).node_id == expected


def test_the_papers_measure_alone_fills_the_model_a_shape_needs_whole():
    """Both nodes already lack the 8 free GPUs, so their fragmentation falls alike: the tighter fit."""
    a = used(node("a", gpus=8, model="A", cpu=96_000), 0, exclusive=True)
    b = used(node("b", gpus=8, model="B", cpu=128_000), 0, exclusive=True)
    b.cpu_milli_used = 60_000
    shapes = [whole(1, cpu_milli=4_000)] * 6 + [whole(8, cpu_milli=120_000)] * 4
    assert place(whole(1, cpu_milli=4_000), [a, b], "fgd", Workload(shapes, extensions=False)).node_id == "b"


@pytest.mark.parametrize(
    ("busy_gpus", "expected"),
    [
        # 2 GPUs, 142 cores: CPU to spare. 14 cores left on `gpu` still feed its GPU's claims (10 each),
        # so the CPU-only claim takes the tighter fit.
        (0, "gpu"),
        # 10 GPUs, 142 cores: 14 per GPU, while the claims ask 20 (10 for GPU claims, 10 for CPU-only
        # ones). Every core is some GPU's: the claim leaves `gpu` the CPU for its GPU.
        (8, "full"),
    ],
)
def test_fgd_cpu_only_claims_spare_the_cpu_of_free_gpus_where_cpu_is_scarce(busy_gpus, expected):
    nodes = [
        used(node("full", gpus=1, cpu=110_000), 0, exclusive=True),  # 100 cores free
        node("gpu", gpus=1, cpu=24_000),
        node("busy", gpus=busy_gpus, cpu=8_000),  # too little CPU for the claim
    ]
    nodes[0].cpu_milli_used = 10_000
    for i in range(busy_gpus):
        used(nodes[2], i, exclusive=True)
    shapes = [whole(1, cpu_milli=10_000)] * 5 + [Request("cpu", cpu_milli=10_000)] * 5
    assert place(Request("cpu", cpu_milli=10_000), nodes, "fgd", Workload(shapes)).node_id == expected


def test_fleet_answers_like_a_fresh_fleet_after_changes():
    nodes = [node(f"n{i}", gpus=2) for i in range(3)]
    fleet = Fleet(nodes)
    placed = []
    for _ in range(6):  # one per GPU: two 700s do not share a GPU
        p = fleet.place(frac(compute=700))
        fleet.apply(p)
        placed.append(p)
    assert fleet.place(frac(compute=700)).reason == "0/3 nodes: 3 insufficient GPU compute"
    fleet.release(placed[0])
    again = fleet.place(frac(compute=700))
    assert isinstance(again, Placement)
    assert (again.node_id, again.gpu_indexes) == (placed[0].node_id, placed[0].gpu_indexes)


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError):
        place(frac(compute=1), [node("n")], "first-fit")


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Request("whole", gpus=0),
        lambda: Request("whole", gpus=9),
        lambda: Request("fraction"),
        lambda: Request("fraction", compute_milli=1001),
        lambda: Request("mig"),
        lambda: Request("gpu"),
    ],
)
def test_malformed_requests_are_refused(bad):
    with pytest.raises(ValueError):
        bad()


# --- fits_ever


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (whole(4), "0/2 nodes: 2 not enough free GPUs"),
        (frac(memory=100_000), "0/2 nodes: 2 insufficient GPU memory"),
        (frac(compute=100, cpu_milli=200_000), "0/2 nodes: 2 insufficient CPU"),
        (mig("1g.10gb"), "0/2 nodes: 2 wrong sharing mode"),
        (whole(2), None),
        (frac(memory=81920), None),
    ],
)
def test_fits_ever(request_, expected):
    shapes = [node("a", gpus=2), node("b", gpus=2)]
    assert fits_ever(request_, shapes) == expected


def test_an_empty_fleet_built_once_answers_every_request_as_a_fresh_one():
    # The allocator asks the catalog's empty fleet about each new claim shape, built once per period.
    shapes = [node("a", gpus=2), node("b", gpus=2)]
    once = empty_fleet(shapes)
    for request_ in [whole(4), frac(memory=100_000), whole(2), mig("1g.10gb"), frac(memory=81920), whole(4)]:
        assert fits_ever(request_, once) == fits_ever(request_, shapes)
    assert all(n.cpu_milli_used == 0 and not any(g.exclusive for g in n.gpus) for n in once.nodes)


def test_fits_ever_ignores_current_use_and_health():
    busy = used(node("a", gpus=2, schedulable=False), 0, compute=1000, memory=81920, exclusive=True)
    busy.gpus[1].healthy = False
    assert isinstance(place(whole(2), [busy]), Unplaceable)
    assert fits_ever(whole(2), [busy]) is None


# --- compute requests and limits ---------------------------------------------------------------------

A10_MIB = 24 * 1024
TRAINING = Request("fraction", memory_mib=8 * 1024, compute_milli=700)
INFERENCE = Request("fraction", memory_mib=2 * 1024, compute_milli=200)


def a10(**policy):
    return node("a10", mode="time-slicing", gpus=1, model="A10", gpu_memory=A10_MIB, **policy)


def place_all(nodes, requests):
    fleet = Fleet(nodes)
    results = []
    for request in requests:
        result = fleet.place(request)
        if isinstance(result, Placement):
            fleet.apply(result)
        results.append(result)
    return results


def test_ceilings_may_oversubscribe_a_time_sliced_gpu_within_its_budget():
    """The users' first scenario: a training job (8Gi, 70%) and three inference services (2Gi, 20%) on
    one A10. Ceilings add up to 130%: over the GPU, within a 200% budget; guarantees (10% each) do not."""
    nodes = [a10(ceiling_budget=2000, default_guarantee=100)]
    results = place_all(nodes, [TRAINING, INFERENCE, INFERENCE, INFERENCE])
    assert all(isinstance(r, Placement) for r in results)
    assert [(r.compute_milli, r.guaranteed_milli) for r in results] == [(700, 100)] + [(200, 100)] * 3
    gpu = nodes[0].gpus[0]
    assert (gpu.memory_used_mib, gpu.compute_used, gpu.ceiling_used) == (14 * 1024, 400, 1300)
    assert invariant_violations(nodes) == []


def test_without_oversubscription_ceilings_are_reservations():
    nodes = [a10()]  # budget 1000, guarantee = ceiling: today's semantics
    results = place_all(nodes, [TRAINING, INFERENCE, INFERENCE, INFERENCE])
    assert [isinstance(r, Placement) for r in results] == [True, True, False, False]
    assert results[2].reason == "0/1 nodes: 1 insufficient GPU compute"


def test_guaranteed_shares_never_add_up_past_the_gpu():
    """Explicit guarantees are held even where ceilings may oversubscribe: 70% + 20% + 20% > 100%."""
    nodes = [a10(ceiling_budget=4000, default_guarantee=100)]
    sure = [
        Request(
            "fraction",
            memory_mib=r.memory_mib,
            compute_milli=r.compute_milli,
            guaranteed_milli=r.compute_milli,
        )
        for r in (TRAINING, INFERENCE, INFERENCE)
    ]
    results = place_all(nodes, sure)
    assert [isinstance(r, Placement) for r in results] == [True, True, False]
    assert nodes[0].gpus[0].compute_used == 900


def test_memory_is_never_oversubscribed_whatever_the_budget():
    nodes = [a10(ceiling_budget=4000, default_guarantee=0)]
    big = Request("fraction", memory_mib=10 * 1024, compute_milli=100)
    results = place_all(nodes, [big, big, big])
    assert [isinstance(r, Placement) for r in results] == [True, True, False]
    assert results[2].reason == "0/1 nodes: 1 insufficient GPU memory"


def test_the_ceiling_budget_bounds_the_sum_of_ceilings():
    nodes = [a10(ceiling_budget=1500, default_guarantee=0)]
    results = place_all(nodes, [TRAINING, TRAINING, INFERENCE])
    assert [isinstance(r, Placement) for r in results] == [True, True, False]
    assert nodes[0].gpus[0].ceiling_used == 1400


def test_a_state_that_comes_back_keeps_its_cached_answers(monkeypatch):
    # A node state that lost its last node and comes back is not evaluated again for a claim shape that
    # already has its answer (answers never change; at 10x fleet a quarter of evaluations were repeats).
    fleet = Fleet([node("a", gpus=1), node("b", gpus=1)])
    half, third = Request("fraction", compute_milli=500), Request("fraction", compute_milli=300)
    first = fleet.place(half)
    fleet.apply(first)  # a: idle -> half used (a new state)
    assert isinstance(fleet.place(third), Placement)  # `third` evaluates both states
    fleet.release(first)  # the half-used state has no node left
    fleet.apply(fleet.place(half))  # ... and comes back
    evaluated = []
    original = Fleet._evaluate
    monkeypatch.setattr(
        Fleet, "_evaluate", staticmethod(lambda *args: evaluated.append(args) or original(*args))
    )
    assert isinstance(fleet.place(third), Placement)
    assert evaluated == []
