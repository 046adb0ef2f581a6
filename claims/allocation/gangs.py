"""Gang placement: `count` identical member claims placed all or nothing (at least `minimum` at once),
packed into the tightest topology domain that holds them.

Pure: no Django. A member lands on one node, so how many members fit in a set of nodes is the sum of
what fits on each node alone; that is counted once per node state of the fleet, on a copy of one node
in it (`node_capacity`), and the chosen nodes' placements are made on copies of them. Domains are tried
from the tightest level out: one node, one NVLink domain (GFD's `nvidia.com/gpu.clique` on multi-node
NVLink systems), one rack, one zone, then the whole candidate set. At the first level where a domain
holds the target, the one left with the fewest spare member slots wins (least fragmentation), then the
one needing the fewest nodes, then its name, so the choice is repeatable."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace

from claims.allocation.fleet import Fleet, PlacementCache
from claims.allocation.state import WHOLE, NodeState, Placement, Request

# Levels from the tightest out; a node's topology names its domain at each level it has a label for.
NODE, NVLINK, RACK, ZONE, ANY = "node", "nvlink", "rack", "zone", "any"
LEVELS = (NODE, NVLINK, RACK, ZONE, ANY)

# (one node alone, the request) -> the member's placement there, or None. The caller's policy decides
# where on the node a member goes (Fleet.place on a one-node fleet).
PlaceOnNode = Callable[[Fleet, Request], Placement | None]


@dataclass(frozen=True)
class GangPlacement:
    """Where the members go (one placement each, `len(placements)` of them), and the domain chosen."""

    placements: list[Placement]
    level: str
    domain: str


@dataclass(frozen=True)
class GangShortfall:
    """Why the gang does not fit: at most `fits` members would, `minimum` are needed."""

    fits: int
    minimum: int


def node_capacity(
    node: NodeState, request: Request, count: int, place: PlaceOnNode, cache: PlacementCache
) -> list[Placement]:
    """Up to `count` member placements on the node alone, each applied before the next (on a copy)."""
    if not _may_hold_one(node, request):
        return []
    fleet = Fleet([_copy(node)], cache)
    placements: list[Placement] = []
    while len(placements) < count:
        placement = place(fleet, request)
        if placement is None:
            break
        fleet.apply(placement)
        placements.append(placement)
    return placements


def _may_hold_one(node: NodeState, request: Request) -> bool:
    """Cheap necessary conditions: most nodes of a busy fleet fail them, and need no copy."""
    return (
        node.schedulable
        and not node.preflight_failure
        and node.cpu_milli_total - node.cpu_milli_used >= request.cpu_milli
        and node.memory_mib_total - node.memory_mib_used >= request.host_memory_mib
        and (request.kind != WHOLE or sum(g.idle() for g in node.gpus) >= request.gpus)
    )


def _copy(node: NodeState) -> NodeState:
    """A copy to place on: what placing changes (the GPUs' use) is copied, the rest shared."""
    return replace(node, gpus=[replace(gpu) for gpu in node.gpus])


def place_gang(
    request: Request,
    count: int,
    minimum: int,
    fleet: Fleet,
    topology: Mapping[Hashable, Mapping[str, str]],
    place: PlaceOnNode,
) -> GangPlacement | GangShortfall:
    """Up to `count` members, never fewer than `minimum` (0: as many as fit, possibly none), in the
    tightest domain of the fleet's nodes that holds them; changes nothing. `topology`: node id ->
    {level: domain name} for NVLINK/RACK/ZONE."""
    cache = PlacementCache()
    by_state: dict[int, int] = {}
    room: dict[Hashable, int] = {}
    for node in fleet.nodes:
        state = fleet.state_of(node.id)
        if state not in by_state:
            by_state[state] = len(node_capacity(node, request, count, place, cache))
        room[node.id] = by_state[state]
    nodes = [node for node in fleet.nodes if room[node.id]]
    fits = min(count, sum(room.values()))
    if fits < max(minimum, 1):
        return GangShortfall(fits, minimum)
    for level in LEVELS:
        domains: dict[str, list[Hashable]] = defaultdict(list)
        for node in nodes:
            name = _domain_of(node.id, level, topology)
            if name is not None:
                domains[name].append(node.id)
        best = None
        for name, members in domains.items():
            slots = sum(room[n] for n in members)
            if slots < fits:
                continue
            chosen = _fewest_nodes(members, room, fits)
            key = (slots - fits, len(chosen), name)
            if best is None or key < best[0]:
                best = (key, chosen, name)
        if best is not None:
            placements = [
                p
                for node_id in best[1]
                for p in node_capacity(fleet.node(node_id), request, count, place, cache)
            ]
            return GangPlacement(placements[:fits], level, best[2])
    raise AssertionError("the whole set holds what fits")  # ANY has every node


def _domain_of(node_id: Hashable, level: str, topology: Mapping[Hashable, Mapping[str, str]]) -> str | None:
    if level == NODE:
        return str(node_id)
    if level == ANY:
        return ""
    return topology.get(node_id, {}).get(level) or None


def _fewest_nodes(members: list[Hashable], room: Mapping[Hashable, int], fits: int) -> list[Hashable]:
    """Nodes holding `fits` members: the roomiest first, the last one the smallest that completes them,
    so as few nodes as possible are used and the last one is filled most."""
    chosen: list[Hashable] = []
    need = fits
    left = sorted(members, key=lambda n: -room[n])
    while need > 0:
        if room[left[0]] < need:
            chosen.append(left[0])
            need -= room[left.pop(0)]
            continue
        chosen.append(min((n for n in left if room[n] >= need), key=lambda n: room[n]))
        need = 0
    return chosen
