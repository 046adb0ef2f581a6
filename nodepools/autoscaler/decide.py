"""The autoscaler's decisions, pure (no Django): given a cluster's autoscaling pools and its pending
claims, what each pool should do now, and why. In the spirit of the Kubernetes cluster-autoscaler:

- **Scale up** when pending claims would fit a new node of the pool. The claims are placed first on
  empty copies of the pool's node (its shape, as "can it ever fit?" sees it) with the placement core,
  bin-packing, the way the cluster-autoscaler's estimator packs pods onto template nodes: nodes already
  asked for and not there yet count first, so a claim is never paid for twice; the pool grows by the
  new nodes that got a claim, up to `max_nodes` and what its region may still give it (`room`). A claim
  for no pool in particular goes to the first pool that would hold it, whole GPUs to exclusive pools
  first, as the allocator tries them.
- **Cancel a scale-down** when pending claims would fit the node being drained for removal.
- **Scale down** one node at a time when the pool is settled, nothing pending would fit it and a node has
  held no claim for the pool's `scale_down_delay_s`: never below `min_nodes`, never a cordoned node (an
  upgrade or a person took it out of service), not while something holds the pool's nodes (a driver
  upgrade run), and only where the provider removes the very node chosen.

Every decision names a reason (CamelCase, like a Kubernetes condition) and says why in a sentence.
"""

import copy
from dataclasses import dataclass, field
from enum import StrEnum

from claims.allocation import Fleet, NodeState, Placement, Request, fits_ever
from claims.allocation.fleet import BINPACK


class Action(StrEnum):
    NONE = "none"
    SCALE_UP = "scale-up"
    SCALE_DOWN = "scale-down"  # drain the chosen node, then remove it
    CANCEL_SCALE_DOWN = "cancel-scale-down"


@dataclass(frozen=True)
class IdleNode:
    name: str
    idle_s: float  # how long it has held no claim


@dataclass(frozen=True)
class PoolView:
    id: int
    shape: NodeState  # an empty node of the pool
    node_count: int  # nodes asked for
    nodes: int  # nodes it has
    min_nodes: int
    max_nodes: int
    scale_down_delay_s: int
    room: int  # more nodes its region may give it now, beyond node_count
    exclusive: bool = False
    idle: tuple[IdleNode, ...] = ()  # schedulable nodes holding no claim
    removing: str = ""  # the node being taken out
    draining: bool = False  # ... and still being drained: its removal may be called off
    can_remove_chosen: bool = True  # the provider removes the node it is told to
    held: str = ""  # why no node may leave now (a driver upgrade runs)


@dataclass(frozen=True)
class Pending:
    id: int
    request: Request
    pool_id: int | None = None  # only this pool


@dataclass(frozen=True)
class ScaleDecision:
    pool_id: int
    action: Action
    reason: str
    message: str
    to_nodes: int
    node: str = ""
    claims: tuple[int, ...] = ()  # the pending claims it acts for


@dataclass
class _Sim:
    """A pool's nodes to come, as the simulation fills them."""

    pool: PoolView
    nodes: list[NodeState] = field(default_factory=list)
    added: int = 0  # new nodes opened
    kept: bool = False  # the node being removed took a claim
    claims: list[int] = field(default_factory=list)
    blocked: list[int] = field(default_factory=list)  # claims that fit a new node it may not have
    fleet: Fleet = field(init=False)

    def __post_init__(self) -> None:
        self.fleet = Fleet(self.nodes)
        for _ in range(max(self.pool.node_count - self.pool.nodes, 0)):
            self._open("upcoming")

    def _open(self, kind: str) -> None:
        node = copy.deepcopy(self.pool.shape)
        node.id = f"{kind}-{len(self.nodes)}"
        self.nodes.append(node)
        self.fleet = Fleet(self.nodes)  # indexed again only when a node opens, not per claim

    def _place(self, claim: Pending) -> Placement | None:
        placement = self.fleet.place(claim.request, BINPACK) if self.nodes else None
        return placement or None

    def take(self, claim: Pending) -> bool:
        """Place the claim on a node to come, opening one if the pool may grow; False if it cannot."""
        placement = self._place(claim)
        if placement is None and self.pool.draining and not self.kept:
            self.kept = True
            self._open("removing")
            placement = self._place(claim)
        if placement is None:
            if self.added >= min(self.pool.max_nodes - self.pool.node_count, self.pool.room):
                self.blocked.append(claim.id)
                return False
            self.added += 1
            self._open("new")
            placement = self._place(claim)
        self.fleet.apply(placement)
        self.claims.append(claim.id)
        return True


def decide(pools: list[PoolView], pending: list[Pending]) -> dict[int, ScaleDecision]:
    """Pool id -> what it should do now. `pending`: highest priority first, then oldest."""
    sims = {pool.id: _Sim(pool) for pool in pools}
    for claim in pending:
        whole = claim.request.kind == "whole"
        candidates = [s for s in sims.values() if claim.pool_id in (None, s.pool.id)]
        candidates.sort(key=lambda s: whole and not s.pool.exclusive)
        for sim in candidates:
            if fits_ever(claim.request, [sim.pool.shape]) is None and sim.take(claim):
                break
    taken = {claim for sim in sims.values() for claim in sim.claims}
    for sim in sims.values():  # a claim another pool takes holds back none
        sim.blocked = [claim for claim in sim.blocked if claim not in taken]
    return {pool.id: _decision(sims[pool.id]) for pool in pools}


def _decision(sim: _Sim) -> ScaleDecision:
    pool, n = sim.pool, sim.pool.node_count

    def decision(action: Action, reason: str, message: str, **more) -> ScaleDecision:
        return ScaleDecision(pool.id, action, reason, message, more.pop("to_nodes", n), **more)

    claims = tuple(sim.claims)
    if sim.kept:
        return decision(
            Action.CANCEL_SCALE_DOWN,
            "PendingClaims",
            f"{_claims(claims)} would fit node {pool.removing}, which was being drained for removal: it "
            "stays.",
            node=pool.removing,
            claims=claims,
        )
    if sim.added:
        return decision(
            Action.SCALE_UP,
            "PendingClaims",
            f"{_claims(claims)} would fit {_nodes(sim.added, 'new')}: {n} → {n + sim.added} nodes.",
            to_nodes=n + sim.added,
            claims=claims,
        )
    if claims:
        return decision(
            Action.NONE,
            "WaitingForNodes",
            f"{_claims(claims)} wait for the {_nodes(n - pool.nodes, '')} being added.",
            claims=claims,
        )
    if sim.blocked:
        at_max = n >= pool.max_nodes
        return decision(
            Action.NONE,
            "AtMaxNodes" if at_max else "NoCapacity",
            f"{_claims(sim.blocked)} would fit a new node, but "
            + (f"the pool is at max_nodes {pool.max_nodes}." if at_max else "the region has none to give."),
            claims=tuple(sim.blocked),
        )
    if pool.removing:
        return decision(Action.NONE, "RemovingNode", f"Removing node {pool.removing}.", node=pool.removing)
    return _scale_down(pool, decision)


def _scale_down(pool: PoolView, decision) -> ScaleDecision:
    n, delay = pool.node_count, pool.scale_down_delay_s
    if pool.nodes != n:
        return decision(Action.NONE, "Scaling", f"Waiting for the pool to reach its {n} nodes.")
    ripe = sorted((node for node in pool.idle if node.idle_s >= delay), key=lambda i: (-i.idle_s, i.name))
    if not pool.idle:
        return decision(Action.NONE, "NodesInUse", "Nothing pending fits the pool; every node holds claims.")
    if not ripe:
        return decision(
            Action.NONE,
            "NodesIdle",
            f"{_nodes(len(pool.idle), 'idle')}: one is removed once idle for {delay} s.",
        )
    if pool.held:
        return decision(
            Action.NONE, "ScaleDownHeld", f"{_nodes(len(ripe), 'idle')} past {delay} s stay: {pool.held}."
        )
    if n <= pool.min_nodes:
        return decision(
            Action.NONE,
            "AtMinNodes",
            f"{_nodes(len(ripe), 'idle')} past {delay} s, but the pool is at min_nodes {pool.min_nodes}.",
        )
    if not pool.can_remove_chosen:
        return decision(
            Action.NONE,
            "ProviderCannotChooseNode",
            f"{_nodes(len(ripe), 'idle')} past {delay} s, but this pool's provider cannot remove a chosen "
            "node, so the pool is not scaled down.",
        )
    node = ripe[0]
    return decision(
        Action.SCALE_DOWN,
        "NodeIdle",
        f"Node {node.name} has held no claim for {node.idle_s:.0f} s (the pool's scale-down delay is "
        f"{delay} s): draining it, then {n} → {n - 1} nodes.",
        node=node.name,
        to_nodes=n - 1,
    )


def _claims(ids) -> str:
    return f"{len(ids)} pending claim{'s' if len(ids) != 1 else ''}"


def _nodes(count: int, kind: str) -> str:
    kind = f" {kind}" if kind else ""
    return f"{count}{kind} node{'s' if count != 1 else ''}"
