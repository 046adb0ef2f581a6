"""Numbers for a pending reason: what a claim asks for against the most any node or GPU has free, for
the reason most nodes gave, so "0/4 nodes: 4 insufficient GPU compute" can say how far off it is and
what would help. One pass over the nodes of the pools tried."""

from collections.abc import Iterable

from claims.allocation import fleet
from claims.allocation.state import (
    FRACTION,
    MILLI,
    MODES_FOR_KIND,
    WHOLE,
    NodeState,
    Request,
    isolation_allowed,
)
from nvke.quantity import human_mib as _mib


def _percent(milli: int) -> str:
    return f"{milli / 10:g}%"


SCALE_UP = "another node (scale the pool up) or releasing claims would help"
AT_MAXIMUM = "a higher max_nodes on the pool (it is at its maximum) or releasing claims would help"


def shortfall(request: Request, nodes: Iterable[NodeState], reason: str, helps: str = SCALE_UP) -> str:
    """What the claim needs and the best on offer for `reason` (one of fleet.REASONS), with what would
    help (`helps`; "" for nothing, as for a claim no empty node fits); "" when the reason has no figure
    (a wrong mode, a model not allowed)."""
    nodes = [
        n
        for n in nodes
        if n.schedulable
        and not n.preflight_failure
        and n.sharing_mode in MODES_FOR_KIND[request.kind]
        and (not request.allowed_models or n.gpu_model in request.allowed_models)
        and isolation_allowed(request, n.sharing_mode)
    ]
    scale = f"; {helps}" if helps else ""
    if reason == fleet.INSUFFICIENT_CPU:
        best = max((n.cpu_milli_total - n.cpu_milli_used for n in nodes), default=0)
        return f"needs {request.cpu_milli / 1000:g} CPUs; the most free on a node is {best / 1000:g}{scale}."
    if reason == fleet.INSUFFICIENT_HOST_MEMORY:
        best = max((n.memory_mib_total - n.memory_mib_used for n in nodes), default=0)
        needs = _mib(request.host_memory_mib)
        return f"needs {needs} of host memory; the most free on a node is {_mib(best)}{scale}."
    if reason == fleet.NOT_ENOUGH_GPUS and request.kind == WHOLE:
        best = max((sum(g.idle() for g in n.gpus) for n in nodes), default=0)
        return f"needs {request.gpus} idle GPUs on one node; the most on a node is {best}{scale}."
    gpus = [(n, g) for n in nodes for g in n.gpus if g.healthy and not g.exclusive and not g.mig_used]
    if reason == fleet.INSUFFICIENT_GPU_MEMORY and request.kind == FRACTION:
        best = max((g.memory_mib - g.memory_used_mib for _, g in gpus), default=0)
        needs = _mib(request.memory_mib)
        return f"needs {needs} of GPU memory; the most free on one GPU is {_mib(best)}{scale}."
    if reason == fleet.INSUFFICIENT_GPU_COMPUTE and request.kind == FRACTION:
        fitting = [(n, g) for n, g in gpus if g.memory_used_mib + request.memory_mib <= g.memory_mib]
        if not fitting:
            return ""
        node, gpu = max(
            fitting,
            key=lambda ng: min(MILLI - ng[1].compute_used, ng[0].ceiling_budget - ng[1].ceiling_used),
        )
        guaranteed = node.guarantee(request)
        free, room = MILLI - gpu.compute_used, node.ceiling_budget - gpu.ceiling_used
        asked = f"{_percent(request.compute_milli)} compute"
        if guaranteed != request.compute_milli:
            asked += f" ({_percent(guaranteed)} guaranteed)"
        text = (
            f"needs {asked}; the best GPU has {_percent(free)} free to guarantee and "
            f"{_percent(room)} left under its pool's {_percent(node.ceiling_budget)} of ceilings"
        )
        if room < request.compute_milli and guaranteed <= free and node.ceiling_budget < 4 * MILLI:
            return f"{text}{scale}, or a higher compute_oversubscription_percent on the pool."
        return f"{text}{scale}."
    return ""
