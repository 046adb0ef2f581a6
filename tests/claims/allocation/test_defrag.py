"""Defragmentation planner: bounded moves that free whole GPUs."""

import copy

from claims.allocation import Fleet, Placement, Request, apply, invariant_violations, plan_defrag, release

from .fleets import node


def fragmented():
    """Four GPUs on two nodes, each 30% used by one fraction: no GPU is free for a whole-GPU claim."""
    nodes = [node("a", gpus=2), node("b", gpus=2)]
    fleet = Fleet(nodes)
    claims = {}
    for n in nodes:
        for g in n.gpus:
            p = Placement(n.id, (g.index,), 0, 300, "none", Request("fraction", compute_milli=300))
            fleet.apply(p)
            claims[f"{n.id}-{g.index}"] = p
    return nodes, claims


def idle_gpus(nodes):
    return sum(g.idle() for n in nodes for g in n.gpus)


def apply_moves(nodes, moves):
    for move in moves:
        release(move.source, nodes)
        apply(move.target, nodes)


def test_frees_a_whole_gpu_within_the_move_budget():
    nodes, claims = fragmented()
    before = copy.deepcopy(nodes)
    moves = plan_defrag(nodes, claims, max_moves=1)
    assert nodes == before  # planning changes nothing
    assert 1 <= len(moves) <= 1
    apply_moves(nodes, moves)
    assert invariant_violations(nodes) == []
    assert idle_gpus(nodes) == 1
    # Now a whole-GPU claim fits where before it did not.
    assert not Fleet(before).place(Request("whole"), "binpack")
    assert Fleet(nodes).place(Request("whole"), "binpack")


def test_more_moves_free_more_gpus():
    nodes, claims = fragmented()
    moves = plan_defrag(nodes, claims, max_moves=3)
    assert len(moves) == 2  # three 300s fit one GPU: two moves empty two GPUs; a third gains nothing
    apply_moves(nodes, moves)
    assert invariant_violations(nodes) == []
    assert idle_gpus(nodes) == 2
    moved = [m.claim_id for m in moves]
    assert len(set(moved)) == len(moved)
    for m in moves:
        assert m.source == claims[m.claim_id]
        assert m.target.request == m.source.request


def test_no_budget_no_moves():
    nodes, claims = fragmented()
    assert plan_defrag(nodes, claims, max_moves=0) == []


def test_whole_gpu_claims_are_never_moved():
    nodes = [node("a", gpus=2)]
    fleet = Fleet(nodes)
    held = fleet.place(Request("whole"))
    fleet.apply(held)
    frac = fleet.place(Request("fraction", compute_milli=500))
    fleet.apply(frac)
    # Nothing to gain: the fraction would only move onto... nothing (the only other GPU is held whole).
    assert plan_defrag(nodes, {"w": held, "f": frac}, max_moves=5) == []


def test_moves_respect_the_claims_constraints():
    """The only GPU with room is on a T4 node; a claim restricted to H100 stays."""
    nodes = [node("h", gpus=2, model="H100"), node("t", gpus=1, model="T4")]
    fleet = Fleet(nodes)
    only_h100 = Request("fraction", compute_milli=300, allowed_models={"H100"})
    p1 = Placement("h", (0,), 0, 300, "none", only_h100)
    p2 = Placement("t", (0,), 0, 300, "none", Request("fraction", compute_milli=300))
    p3 = Placement("h", (1,), 0, 900, "none", Request("fraction", compute_milli=900))
    for p in (p1, p2, p3):
        fleet.apply(p)
    moves = plan_defrag(nodes, {"h100-only": p1, "any": p2, "big": p3}, max_moves=2)
    assert [m.claim_id for m in moves] == ["any"]  # the T4 claim joins the H100 one; the T4 GPU frees
    assert moves[0].target.node_id == "h"
    apply_moves(nodes, moves)
    assert invariant_violations(nodes) == []
    assert nodes[1].gpus[0].idle()


def test_a_failed_trial_on_an_unhealthy_gpu_leaves_it_as_it_was():
    """Each GPU tried is closed, its claims re-placed and the trial undone. An unhealthy GPU's claim
    cannot go anywhere here: undoing puts it back (apply() takes only healthy GPUs) and the GPU stays
    unhealthy, so no later trial moves a claim onto it."""
    nodes = [node("a", gpus=2), node("b", gpus=2)]
    fleet = Fleet(nodes)
    claims = {
        "x": Placement("a", (0,), 0, 800, "none", Request("fraction", compute_milli=800)),
        "big": Placement("a", (1,), 0, 900, "none", Request("fraction", compute_milli=900)),
        "y": Placement("b", (0,), 0, 300, "none", Request("fraction", compute_milli=300)),
        "z": Placement("b", (1,), 0, 150, "none", Request("fraction", compute_milli=150)),
    }
    for p in claims.values():
        fleet.apply(p)
    nodes[0].gpus[0].healthy = False
    before = copy.deepcopy(nodes)
    moves = plan_defrag(nodes, claims, max_moves=4)
    assert nodes == before
    assert [(m.claim_id, m.target.node_id, m.target.gpu_indexes) for m in moves] == [("z", "b", (0,))]
