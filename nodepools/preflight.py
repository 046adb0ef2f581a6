"""Sharing preflight on the control plane: the facts nodes report (nvke-agent, or the provider) checked
against their pool's sharing mode with the agent's own checks (nvke.agent.preflight). A node that fails
is kept out of placement with the check named (the allocator's reason, the node's page and API, and the
pool's SharingPreflight condition)."""

from catalog.models import SharingMode
from nodepools.models import Node, NodePool
from nvke.agent import preflight as checks
from nvke.errors import DomainError

MAX_TEXT = 64
FLAGS = tuple(fact for fact in checks.FACTS if fact not in ("driver_version", "kernel_version"))


def validate_facts(payload: object) -> dict:
    """A report's facts, checked whole (unknown names, wrong types: a DomainError naming the field)."""
    facts = payload.get("facts") if isinstance(payload, dict) else None
    if not isinstance(facts, dict):
        raise DomainError("facts: expected an object of preflight facts.", field="facts")
    for name, value in facts.items():
        where = f"facts.{name}"
        if name not in checks.FACTS:
            raise DomainError(f"{where}: no such fact; known: {', '.join(checks.FACTS)}.", field=where)
        if name in FLAGS and not isinstance(value, bool):
            raise DomainError(f"{where}: expected true or false.", field=where)
        if name not in FLAGS and not (isinstance(value, str) and 0 < len(value) <= MAX_TEXT):
            raise DomainError(f"{where}: expected a version string.", field=where)
    return facts


def facts_of(node: Node) -> dict:
    """What is known of the node: its reported facts, and the driver version its provider reports."""
    known = {"driver_version": node.driver_version} if node.driver_version else {}
    return {**known, **node.preflight}


def failures(node: Node, pool: NodePool) -> list[str]:
    """What fails for the pool's sharing mode on this node (unknown facts do not fail)."""
    return checks.failures(facts_of(node), pool.sharing_mode)


def enforced_isolation(isolation: str, *, kind: str, source: str, sharing_mode: str, facts: dict) -> str:
    """A placed claim's isolation as it holds on its node. On the scheduler path (a pod, `source` "pod")
    a fraction's GPU and limits reach its container only through NVKE's device plugin, so it is `none`
    unless the node's agent reports the plugin registered and, on MPS pools, its MPS daemons up (the
    kubelet drops a resource its node does not advertise and starts the pod unlimited). Whole GPUs and
    MIG slices there are NVIDIA's device plugin's, and DRA claims the DRA driver's: as allocated."""
    if source != "pod" or kind != "fraction":
        return isolation
    if facts.get("device_plugin") is not True:
        return "none"
    if sharing_mode == SharingMode.MPS and facts.get("mps_daemon") is not True:
        return "none"
    return isolation


def update_condition(pool: NodePool) -> None:
    """Set the pool's SharingPreflight condition from its nodes (the caller saves the pool)."""
    failing = [(node.name, fails) for node in pool.nodes.all() if (fails := failures(node, pool))]
    if failing:
        name, fails = failing[0]
        more = f" (and {len(failing) - 1} more nodes)" if len(failing) > 1 else ""
        message = f"{name}: {'; '.join(fails)}{more}. Such nodes take no claims."
        pool.set_condition("SharingPreflight", False, "PreflightFailed", message)
    else:
        pool.set_condition("SharingPreflight", True, "PreflightPassed", "Every node passes its checks.")
