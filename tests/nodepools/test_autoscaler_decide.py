"""The autoscaler's decisions, table-driven against the pure `decide` (nodepools/autoscaler/decide.py):
what each pool does for a set of pending claims and idle nodes, and the reason it gives."""

from dataclasses import replace

import pytest

from claims.allocation import GpuState, NodeState, Request
from nodepools.autoscaler.decide import Action, IdleNode, Pending, PoolView, decide

GIB = 1024


def shape(gpus: int = 1, mode: str = "exclusive") -> NodeState:
    return NodeState(
        id="shape",
        gpu_model="l4",
        sharing_mode=mode,
        gpus=[GpuState(i, 24 * GIB) for i in range(gpus)],
        cpu_milli_total=16_000 * gpus,
        memory_mib_total=128 * GIB * gpus,
    )


def pool(pk: int = 1, **fields) -> PoolView:
    defaults = dict(
        id=pk,
        shape=shape(),
        node_count=2,
        nodes=2,
        min_nodes=1,
        max_nodes=6,
        scale_down_delay_s=600,
        room=100,
        exclusive=True,
    )
    return PoolView(**{**defaults, **fields})


def whole(pk: int, gpus: int = 1, pool_id: int | None = None) -> Pending:
    return Pending(pk, Request("whole", gpus=gpus), pool_id)


def fraction(pk: int, percent: int) -> Pending:
    return Pending(pk, Request("fraction", memory_mib=2 * GIB, compute_milli=percent * 10))


IDLE_LONG = (IdleNode("n-old", 900), IdleNode("n-new", 700))

CASES = [
    # (id, pools, pending, {pool: (action, reason, to_nodes, node, claims)})
    ("busy and nothing pending", [pool()], [], {1: (Action.NONE, "NodesInUse", 2, "", ())}),
    (
        "a pending claim a new node fits",
        [pool()],
        [whole(7)],
        {1: (Action.SCALE_UP, "PendingClaims", 3, "", (7,))},
    ),
    (
        "claims packed two to a node",
        [pool(shape=shape(gpus=2))],
        [whole(1), whole(2), whole(3)],
        {1: (Action.SCALE_UP, "PendingClaims", 4, "", (1, 2, 3))},
    ),
    (
        "fractions packed onto shared GPUs",
        [pool(shape=shape(mode="fractional"), exclusive=False)],
        [fraction(i, 30) for i in range(1, 5)],
        {1: (Action.SCALE_UP, "PendingClaims", 4, "", (1, 2, 3, 4))},
    ),
    (
        "a claim no node of the pool fits",
        [pool()],
        [whole(1, gpus=4)],
        {1: (Action.NONE, "NodesInUse", 2, "", ())},
    ),
    (
        "at max_nodes",
        [pool(node_count=6, nodes=6, max_nodes=6)],
        [whole(1)],
        {1: (Action.NONE, "AtMaxNodes", 6, "", (1,))},
    ),
    ("the region has no room", [pool(room=0)], [whole(1)], {1: (Action.NONE, "NoCapacity", 2, "", (1,))}),
    (
        "max_nodes bounds the growth",
        [pool(node_count=5, nodes=5)],
        [whole(1), whole(2)],
        {1: (Action.SCALE_UP, "PendingClaims", 6, "", (1,))},
    ),
    (
        "a node already coming holds it",
        [pool(node_count=3, nodes=2)],
        [whole(1)],
        {1: (Action.NONE, "WaitingForNodes", 3, "", (1,))},
    ),
    (
        "the node coming holds one, a new one the other",
        [pool(node_count=3, nodes=2)],
        [whole(1), whole(2)],
        {1: (Action.SCALE_UP, "PendingClaims", 4, "", (1, 2))},
    ),
    (
        "a claim for another pool",
        [pool(1), pool(2)],
        [whole(1, pool_id=2)],
        {1: (Action.NONE, "NodesInUse", 2, "", ()), 2: (Action.SCALE_UP, "PendingClaims", 3, "", (1,))},
    ),
    (
        "whole GPUs go to an exclusive pool first",
        [pool(1, shape=shape(mode="time-slicing"), exclusive=False), pool(2)],
        [whole(1)],
        {1: (Action.NONE, "NodesInUse", 2, "", ()), 2: (Action.SCALE_UP, "PendingClaims", 3, "", (1,))},
    ),
    (
        "the next pool when the first may not grow",
        [pool(1, room=0), pool(2)],
        [whole(1)],
        {1: (Action.NONE, "NodesInUse", 2, "", ()), 2: (Action.SCALE_UP, "PendingClaims", 3, "", (1,))},
    ),
    (
        "a claim the node being drained fits calls its removal off",
        [pool(removing="n-1", draining=True)],
        [whole(1)],
        {1: (Action.CANCEL_SCALE_DOWN, "PendingClaims", 2, "n-1", (1,))},
    ),
    (
        "the longest-idle node past the delay goes",
        [pool(idle=IDLE_LONG)],
        [],
        {1: (Action.SCALE_DOWN, "NodeIdle", 1, "n-old", ())},
    ),
    (
        "never below min_nodes",
        [pool(min_nodes=2, idle=IDLE_LONG)],
        [],
        {1: (Action.NONE, "AtMinNodes", 2, "", ())},
    ),
    (
        "idle, not yet for the delay",
        [pool(idle=(IdleNode("n-1", 30),))],
        [],
        {1: (Action.NONE, "NodesIdle", 2, "", ())},
    ),
    (
        "a provider that cannot remove a chosen node",
        [pool(idle=IDLE_LONG, can_remove_chosen=False)],
        [],
        {1: (Action.NONE, "ProviderCannotChooseNode", 2, "", ())},
    ),
    (
        "a driver upgrade holds the nodes",
        [pool(idle=IDLE_LONG, held="driver upgrade run 3 is running")],
        [],
        {1: (Action.NONE, "ScaleDownHeld", 2, "", ())},
    ),
    (
        "not settled",
        [pool(node_count=2, nodes=3, idle=IDLE_LONG)],
        [],
        {1: (Action.NONE, "Scaling", 2, "", ())},
    ),
    (
        "one removal at a time",
        [pool(removing="n-1", idle=IDLE_LONG)],
        [],
        {1: (Action.NONE, "RemovingNode", 2, "n-1", ())},
    ),
    (
        "pending claims that fit keep idle nodes",
        [pool(idle=IDLE_LONG)],
        [whole(1)],
        {1: (Action.SCALE_UP, "PendingClaims", 3, "", (1,))},
    ),
]


@pytest.mark.parametrize(("pools", "pending", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decisions(pools, pending, expected):
    decisions = decide(pools, pending)
    got = {pk: (d.action, d.reason, d.to_nodes, d.node, d.claims) for pk, d in decisions.items()}
    assert got == expected
    for decision in decisions.values():
        assert decision.message  # every decision says why


def test_the_messages_say_what_and_why():
    up = decide([pool()], [whole(1), whole(2)])[1]
    assert up.message == "2 pending claims would fit 2 new nodes: 2 → 4 nodes."
    down = decide([pool(idle=IDLE_LONG)], [])[1]
    assert down.message == (
        "Node n-old has held no claim for 900 s (the pool's scale-down delay is 600 s): draining it, then "
        "2 → 1 nodes."
    )
    blocked = decide([pool(room=0)], [whole(1)])[1]
    assert blocked.message == "1 pending claim would fit a new node, but the region has none to give."


def test_the_simulation_leaves_its_inputs_alone():
    view = pool(node_count=3, nodes=2)
    before = replace(view.shape)
    decide([view], [whole(1), whole(2)])
    assert view.shape == before and all(gpu.idle() for gpu in view.shape.gpus)
