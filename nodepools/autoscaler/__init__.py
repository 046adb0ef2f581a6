"""The pool autoscaler: node pools with `autoscaling` on grow for pending claims a new node would fit and
lose nodes that held no claim for their `scale_down_delay_s`, within `min_nodes`..`max_nodes`.

- `decide`: the decisions, pure (the placement core simulates where pending claims would go);
- `service`: the control loop, one step per cluster, and the provider calls after it.

Beat steps every autoscaling cluster (`nodepools.tasks.autoscale_all`); so does the embedded default's
one scheduler, which plays beat's schedule (telemetry/embedded.py).

`request(cluster)` asks for a step after commit, when the cluster has an autoscaling pool. Apps above
this one that must not lose a pool's nodes for a while (a driver upgrade run) say so with
`hold_scale_down`, in their AppConfig.ready, without this package knowing them."""

from collections.abc import Callable

from nodepools.autoscaler.service import HOLDS, autoscale, clusters
from nodepools.models import NodePool
from nvke import jobs


def hold_scale_down(holds: Callable[[list[int]], dict[int, str]]) -> None:
    """`holds(pool_ids)` -> {pool id: why its nodes stay} for the pools that must not shrink now."""
    HOLDS.append(holds)


def request(cluster_id: int) -> None:
    if NodePool.objects.filter(cluster_id=cluster_id, autoscaling=True).exists():
        jobs.enqueue("nodepools.tasks.autoscale_cluster", cluster_id)


__all__ = ["autoscale", "clusters", "hold_scale_down", "request"]
