"""Gang placement in the pure core: all or nothing, the tightest topology domain, least fragmentation."""

from claims.allocation import Fleet, Request
from claims.allocation.gangs import ANY, NODE, NVLINK, RACK, GangPlacement, GangShortfall, place_gang

from .fleets import node

EIGHT = Request("whole", gpus=8)


def binpack(fleet: Fleet, request: Request):
    return fleet.place(request, "binpack") or None


def nodes(count: int, gpus: int = 8) -> Fleet:
    return Fleet([node(f"n{i}", mode="exclusive", gpus=gpus) for i in range(count)])


def test_all_or_nothing_below_the_minimum():
    fleet = nodes(3)
    result = place_gang(EIGHT, 4, 4, fleet, {}, binpack)
    assert result == GangShortfall(fits=3, minimum=4)


def test_at_least_the_minimum_and_as_many_as_fit():
    result = place_gang(EIGHT, 4, 2, nodes(3), {}, binpack)
    assert isinstance(result, GangPlacement) and len(result.placements) == 3
    assert len({p.node_id for p in result.placements}) == 3


def test_one_node_first_when_the_members_fit_on_it():
    result = place_gang(Request("whole", gpus=2), 4, 4, nodes(3), {}, binpack)
    assert result.level == NODE and {p.node_id for p in result.placements} == {"n0"}
    assert sorted(i for p in result.placements for i in p.gpu_indexes) == list(range(8))


def test_the_nvlink_domain_that_fits_tightest_wins():
    fleet = nodes(5)
    topology = {
        "n0": {NVLINK: "a", RACK: "r1"},
        "n1": {NVLINK: "a", RACK: "r1"},
        "n2": {NVLINK: "b", RACK: "r1"},
        "n3": {NVLINK: "b", RACK: "r1"},
        "n4": {NVLINK: "b", RACK: "r1"},
    }
    result = place_gang(EIGHT, 2, 2, fleet, topology, binpack)
    assert (result.level, result.domain) == (NVLINK, "a")  # b would be left with a lone free node
    assert {p.node_id for p in result.placements} == {"n0", "n1"}


def test_a_rack_when_no_nvlink_domain_holds_the_gang():
    fleet = nodes(4)
    fleet.apply(fleet.place(EIGHT, "binpack"))  # n0 is taken

    assert not fleet.node("n0").gpus[0].idle()
    topology = {
        "n0": {NVLINK: "a", RACK: "r1"},
        "n1": {NVLINK: "a", RACK: "r1"},
        "n2": {NVLINK: "b", RACK: "r1"},
        "n3": {NVLINK: "c", RACK: "r2"},
    }
    result = place_gang(EIGHT, 2, 2, fleet, topology, binpack)
    assert (result.level, result.domain) == (RACK, "r1")
    assert {p.node_id for p in result.placements} == {"n1", "n2"}


def test_anywhere_when_no_domain_holds_it():
    topology = {"n0": {RACK: "r1"}, "n1": {RACK: "r2"}}
    result = place_gang(EIGHT, 2, 2, nodes(2), topology, binpack)
    assert result.level == ANY and len(result.placements) == 2


def test_nothing_is_changed_on_the_nodes_given():
    fleet = nodes(2)
    place_gang(EIGHT, 2, 2, fleet, {}, binpack)
    assert all(g.idle() for n in fleet.nodes for g in n.gpus)
