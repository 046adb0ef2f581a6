"""The allocator: the only writer of claims' placements (allocations, GPU shares, the allocation log).
Around the pure placement core (`claims.allocation`):

- `locks`: the cluster's allocation lock, and the order every lock is taken in;
- `inventory`: a cluster's schedulable state, and the one per-process cache of it (`CACHE`);
- `shapes`: claim validation, a claim's request, the empty nodes "can it ever fit?" is asked against;
- `service`: create, release, place pending, evict (claims, or a node's), resize, topology changed;
- `placing`: where one claim fits, else why it waits; whether it could ever fit;
- `groups`: claim groups (gangs), created, placed and released as a unit;
- `admission`: queues under the lock: a pass's book, admission within quota, fair order, standing;
- `rows`: a placement pass written in one statement;
- `sql`: the allocator's PostgreSQL text: the lock functions (migrations load them from here) and the
  statements it runs by hand;
- `defrag`: moves that free whole GPUs;
- `preview`: where a node's claims would go if it were drained now (reads only);
- `queue`: placement passes run by a worker.

Node and GPU rows are `nodepools.nodes`'s, which tells the allocator when they change. Only the
package itself takes the lock or touches its inventory and rows (the `allocator-internals` contract)."""

from claims.allocator.defrag import PlannedMove, apply_defrag, plan_defrag
from claims.allocator.groups import create_group, release_group
from claims.allocator.inventory import prune_log, topology_of
from claims.allocator.preview import drain_preview
from claims.allocator.queue import pass_started, request_placement
from claims.allocator.service import (
    Resized,
    create_claim,
    evict_claims,
    evict_node,
    nodes_removed,
    place_pending,
    release_claim,
    resize_claim,
    topology_changed,
)
from claims.allocator.shapes import pool_shape, request_of

__all__ = [
    "PlannedMove",
    "Resized",
    "apply_defrag",
    "create_claim",
    "create_group",
    "drain_preview",
    "evict_claims",
    "evict_node",
    "nodes_removed",
    "pass_started",
    "place_pending",
    "plan_defrag",
    "pool_shape",
    "prune_log",
    "release_claim",
    "release_group",
    "request_of",
    "request_placement",
    "resize_claim",
    "topology_changed",
    "topology_of",
]
