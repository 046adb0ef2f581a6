"""Node and GPU rows: the only writer of a node's readiness, cordon and driver version and of a GPU's
health. Each change tells the allocator (`allocator.topology_changed`) in the same transaction, so no
placement lands on a node or GPU that has just left service. Upgrades and telemetry call these; the
pool's reconcile mirrors the provider's nodes through `sync_nodes`."""

import datetime
import uuid

from django.db import IntegrityError, transaction

from claims import allocator
from nodepools import preflight
from nodepools.models import Gpu, Node, NodePool
from nvke.errors import Conflict, DomainError
from nvke.providers.base import NodeInfo


def sync_nodes(pool: NodePool, reported: list[NodeInfo]) -> bool:
    """Mirror the provider's nodes and GPUs into the pool's rows (create, update, remove); claims on
    removed nodes turn pending. Only rows that differ are written, and only a change tells the allocator
    (a watch reconciles on every event: most change nothing). A GPU whose UUID ("") or health (None)
    the provider does not know keeps what NVKE has. True when something changed."""
    existing = {node.name: node for node in pool.nodes.all()}
    gone = Node.objects.filter(pool=pool).exclude(name__in=[n.name for n in reported])
    changed = gone.exists()
    if changed:
        allocator.nodes_removed(gone)
        gone.delete()
    for info in reported:
        node = existing.get(info.name) or Node(tenant_id=pool.tenant_id, pool=pool, name=info.name)
        values = {
            "status": Node.Status.READY if info.ready else Node.Status.NOT_READY,
            "cordoned": info.unschedulable,
            "driver_version": info.driver_version,
            "kubelet_version": info.kubelet_version,
            "node_image": info.node_image,
            "cpu_millicores": info.cpu_millicores,
            "memory_mib": info.memory_mib,
            "labels": info.labels,
        }
        if info.preflight:  # else the provider knows none: keep what the node's agent reported
            values["preflight"] = info.preflight
        changed |= _save_if_changed(node, values)
        have = {gpu.index: gpu for gpu in node.gpus.all()} if info.name in existing else {}
        for gpu_info in info.gpus:
            gpu = have.get(gpu_info.index) or Gpu(tenant_id=pool.tenant_id, node=node, index=gpu_info.index)
            values = {"memory_mib": gpu_info.memory_mib, "nvlink_domain": gpu_info.nvlink_domain}
            if gpu_info.uuid:  # "": the provider does not know it (a new row draws a placeholder)
                values["uuid"] = gpu_info.uuid.removeprefix("GPU-")
            if gpu_info.healthy is not None:
                values["healthy"] = gpu_info.healthy
            changed |= _save_if_changed(gpu, values)
    if changed:
        preflight.update_condition(pool)  # the caller saves the pool
        allocator.topology_changed(pool.cluster_id)
        allocator.request_placement(pool.cluster_id)
    return changed


def record_preflight(node_id: int, facts: dict) -> list[str]:
    """The sharing preflight facts a node's agent read (checked by preflight.validate_facts); returns
    what fails for its pool's mode. A change of outcome tells the allocator and the pool's condition."""
    with transaction.atomic():
        node = Node.objects.select_for_update().select_related("pool").get(pk=node_id)
        pool = NodePool.objects.select_for_update().get(pk=node.pool_id)
        before = preflight.failures(node, pool)
        node.preflight = {**node.preflight, **facts}
        node.save(update_fields=["preflight"])
        after = preflight.failures(node, pool)
        if after != before:
            preflight.update_condition(pool)
            pool.save(update_fields=["conditions", "updated_at"])
            allocator.topology_changed(pool.cluster_id)
            allocator.request_placement(pool.cluster_id)
    return after


def _save_if_changed(row: Node | Gpu, values: dict) -> bool:
    """Set `values` on the row and save it if it is new or one of them differs (compared as the field
    stores it: a UUID string against the UUID)."""
    fields = {name: type(row)._meta.get_field(name) for name in values}
    if not row._state.adding and all(
        getattr(row, name) == fields[name].to_python(value) for name, value in values.items()
    ):
        return False
    for name, value in values.items():
        setattr(row, name, value)
    row.save()
    return True


def record_gpu_uuids(node_id: int, uuids: dict[int, str]) -> int:
    """The UUIDs a node's nvke-agent read from NVML, by GPU index, for an attached cluster whose provider
    cannot tell them (no DRA driver). Returns how many GPUs changed; a UUID another GPU of the same tenant
    holds is a 409, an index the node does not have a 400. Other tenants' GPUs are never looked at: a
    node token learns nothing of them and cannot take a UUID first to block their inventory."""
    node = Node.objects.select_related("pool__cluster").get(pk=node_id)
    if not node.pool.cluster.attached:
        raise Conflict(
            "The provider names this node's GPUs; an agent's inventory applies to attached clusters only.",
            field="gpus",
            code="provider_names_gpus",
        )
    duplicate = Conflict("Another GPU already has one of these UUIDs.", field="gpus", code="duplicate_uuid")
    try:
        with transaction.atomic():
            gpus = {gpu.index: gpu for gpu in Gpu.objects.select_for_update().filter(node_id=node_id)}
            if missing := sorted(set(uuids) - set(gpus)):
                raise DomainError(f"The node has no GPU {missing[0]}.", field="gpus", code="unknown_gpu")
            changed = [gpus[i] for i, value in uuids.items() if str(gpus[i].uuid) != value]
            after = [uuids.get(i, str(gpu.uuid)) for i, gpu in gpus.items()]
            taken = Gpu.objects.filter(
                tenant_id=node.tenant_id, uuid__in=[uuids[g.index] for g in changed]
            ).exclude(node_id=node_id)
            if len(set(after)) < len(after) or taken.exists():
                raise duplicate
            for gpu in changed:
                gpu.uuid = uuid.uuid4()  # first out of the way: two GPUs of the node may swap UUIDs
                gpu.save(update_fields=["uuid"])
            for gpu in changed:
                gpu.uuid = uuids[gpu.index]
                gpu.save(update_fields=["uuid"])
    except IntegrityError:  # another node of the tenant took one of them meanwhile
        raise duplicate from None
    return len(changed)


def set_cordons(cluster_id: int, cordons: dict[int, bool]) -> None:
    """Cordon (True) or uncordon (False) nodes of the cluster, by Node pk: the allocator places nothing
    on a cordoned node from now on. One topology change for them all; uncordoned nodes get a pass."""
    if not cordons:
        return
    with transaction.atomic():
        for cordoned in (True, False):
            if pks := [pk for pk, wanted in cordons.items() if wanted is cordoned]:
                Node.objects.filter(pk__in=pks).update(cordoned=cordoned)
        allocator.topology_changed(cluster_id)
    if not all(cordons.values()):  # capacity is back
        allocator.request_placement(cluster_id)


def set_ready(node: Node, ready: bool) -> bool:
    """Ready or NotReady, from heartbeats; False if the node already was (another worker got there)."""
    old, new = (
        (Node.Status.NOT_READY, Node.Status.READY) if ready else (Node.Status.READY, Node.Status.NOT_READY)
    )
    with transaction.atomic():
        if not Node.objects.filter(pk=node.pk, status=old).update(status=new):
            return False
        allocator.topology_changed(node.pool.cluster_id)
    return True


def fail_gpu(gpu: Gpu) -> list[int] | None:
    """Take the GPU out of service; returns the ids of the claims on it (the caller moves them with
    `allocator.evict_claims`), or None if it already was out (another worker got there)."""
    with transaction.atomic():
        if not Gpu.objects.filter(pk=gpu.pk, healthy=True).update(healthy=False):
            return None
        allocator.topology_changed(gpu.node.pool.cluster_id)
        return list(gpu.shares.values_list("allocation__claim_id", flat=True).distinct())


def record_driver(node: Node, *, version: str, gpus_healthy: bool) -> None:
    """What the provider reports of a node's driver: its version, and whether its GPUs came up healthy
    (the simulator cannot tell which one failed, so all of a failed node's GPUs leave service)."""
    if node.driver_version != version:
        Node.objects.filter(pk=node.pk).update(driver_version=version)
        node.driver_version = version
    if not gpus_healthy and Gpu.objects.filter(node=node, healthy=True).update(healthy=False):
        allocator.topology_changed(node.pool.cluster_id)


def record_machine(node: Node, **reported: str) -> None:
    """What the provider reports of a replaced node's machine: `kubelet_version` or `node_image`."""
    changed = {name: value for name, value in reported.items() if getattr(node, name) != value}
    if changed:
        Node.objects.filter(pk=node.pk).update(**changed)
        for name, value in changed.items():
            setattr(node, name, value)


def record_utilization(by_pool: dict[int, float], at: datetime.datetime) -> None:
    """Telemetry's mean GPU utilization of each pool over the last minute."""
    for pool_id, utilization in by_pool.items():
        NodePool.objects.filter(pk=pool_id).update(gpu_utilization=utilization, gpu_utilization_at=at)


def record_idle(pool_ids: list[int], idle: set[int], now: datetime.datetime) -> None:
    """What the autoscaler saw: the nodes of `pool_ids` in `idle` hold no claim (idle since now, unless
    they already were), the others do. Nothing the allocator reads."""
    nodes = Node.objects.filter(pool_id__in=pool_ids)
    nodes.filter(pk__in=idle, idle_since__isnull=True).update(idle_since=now)
    nodes.exclude(pk__in=idle).filter(idle_since__isnull=False).update(idle_since=None)
