"""Choosing victims (the pure core): the fewest, then the fewest GPUs, the lowest priority, the newest;
none when nothing would do; nothing left taken."""

from claims.allocation.preemption import Victim, choose_victims


class Node:
    """One node's free GPUs: a victim taken frees its GPUs; the preemptor needs `need`."""

    def __init__(self, free: int, need: int) -> None:
        self.free, self.need = free, need

    def fits(self) -> bool:
        return self.free >= self.need

    def take(self, victim: Victim) -> None:
        self.free += victim.gpus

    def give_back(self, victim: Victim) -> None:
        self.free -= victim.gpus


def choose(node: Node, victims: list[Victim]) -> list[Victim] | None:
    return choose_victims(victims, node.fits, node.take, node.give_back)


def victim(pk: int, gpus: int, priority: int = 0, created: float = 0.0) -> Victim:
    return Victim((pk,), gpus, priority, created)


def test_one_victim_that_frees_enough_beats_two_smaller_ones():
    node = Node(free=0, need=2)
    chosen = choose(node, [victim(1, 1), victim(2, 1, created=5), victim(3, 2), victim(4, 4)])
    assert [v.claims for v in chosen] == [(3,)]
    assert node.free == 0  # nothing is left taken


def test_fewest_gpus_then_lowest_priority_then_newest():
    assert choose(Node(0, 1), [victim(1, 2), victim(2, 1, priority=3)])[0].claims == (2,)
    assert choose(Node(0, 1), [victim(1, 1, priority=2), victim(2, 1, priority=1)])[0].claims == (2,)
    assert choose(Node(0, 1), [victim(1, 1, created=1.0), victim(2, 1, created=9.0)])[0].claims == (2,)


def test_a_minimal_set_when_no_one_victim_does():
    node = Node(free=1, need=4)
    chosen = choose(node, [victim(1, 1), victim(2, 1), victim(3, 2), victim(4, 2, priority=5)])
    assert sorted(v.claims for v in chosen) == [(1,), (3,)]  # 1 + 1 + 2 = 4; the priority-5 one is spared
    assert node.free == 1


def test_none_when_even_every_victim_would_not_do():
    node = Node(free=0, need=8)
    assert choose(node, [victim(1, 2), victim(2, 4)]) is None
    assert node.free == 0


def test_each_node_is_tried_alone_and_the_best_node_wins():
    """A claim lands on one node: victims on two nodes do not add up."""
    free = {"a": 0, "b": 0}
    where = {1: "a", 2: "a", 3: "b"}
    need = 2

    def take(v: Victim) -> None:
        free[where[v.claims[0]]] += v.gpus

    def give_back(v: Victim) -> None:
        free[where[v.claims[0]]] -= v.gpus

    victims = [victim(1, 1), victim(2, 1), victim(3, 2, priority=1)]
    chosen = choose_victims(
        victims, lambda: max(free.values()) >= need, take, give_back, lambda v: [where[v.claims[0]]]
    )
    assert [v.claims for v in chosen] == [(3,)]  # one victim on b, not two on a
    assert free == {"a": 0, "b": 0}


def test_with_fits_in_each_node_is_weighed_alone_and_the_fleet_never():
    """Where only a node's own victims can make room, `fits_in(node)` is asked, not the fleet-wide fits."""
    free = {"a": 0, "b": 0}
    where = {1: "a", 2: "a", 3: "b"}
    asked: list[str] = []

    def take(v: Victim) -> None:
        free[where[v.claims[0]]] += v.gpus

    def give_back(v: Victim) -> None:
        free[where[v.claims[0]]] -= v.gpus

    def fits_in(node: str) -> bool:
        asked.append(node)
        return free[node] >= 2

    def fleet_wide() -> bool:
        raise AssertionError("the whole fleet was weighed")

    victims = [victim(1, 1), victim(2, 1), victim(3, 2, priority=1)]
    chosen = choose_victims(victims, fleet_wide, take, give_back, lambda v: [where[v.claims[0]]], fits_in)
    assert [v.claims for v in chosen] == [(3,)]
    assert set(asked) == {"a", "b"} and free == {"a": 0, "b": 0}
