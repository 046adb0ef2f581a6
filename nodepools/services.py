"""Node pool lifecycle: create, update (scale), delete, and the reconcile step that drives the provider
towards the desired node count and mirrors what it reports into Node and Gpu rows."""

import re

from django.conf import settings
from django.db import IntegrityError, transaction

from catalog.compatibility import driver_refusals, image_refusals, mig_layout_refusal, sharing_refusal
from catalog.models import NodeImage, SharingMode
from claims import quotas
from clusters.models import Cluster
from clusters.services import cluster_infrastructure, cluster_key, cluster_operations
from nodepools import capacity, sharing
from nodepools.events import publish_pool
from nodepools.models import NodePool, ScaleDown
from nodepools.nodes import sync_nodes
from nvke import jobs
from nvke.errors import Conflict, DomainError, Incompatible
from nvke.models import check_dns_label
from nvke.node_counts import budget_error
from nvke.providers.base import PoolSpec, ProviderError
from nvke.providers.kubernetes import dra_driver
from nvke.tenancy.context import TenantContext

# Kubernetes label syntax: an optional DNS-subdomain prefix and a name of up to 63 characters.
LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")

MUTABLE_FIELDS = (
    "node_count",
    "min_nodes",
    "max_nodes",
    "autoscaling",
    "scale_down_delay_s",
    "driver_release",
    "sharing_mode",
    "mig_layout",
    "placement_policy",
    "compute_oversubscription_percent",
    "default_guaranteed_percent",
    "upgrade_max_unavailable",
    "upgrade_max_surge",
)


# The autoscaler's scale-down: the node it drained (or is draining) is the one a shrink removes first.
TAKING_OUT = (ScaleDown.DRAINING, ScaleDown.REMOVING)
MAX_SCALE_DOWN_DELAY_S = 86400


def validate_pool(pool: NodePool) -> None:
    """Name, bounds and compatibility; raises a DomainError naming the field."""
    check_dns_label(pool.name)
    for field in ("node_count", "max_nodes"):  # whatever the quotas say, one request stays bounded
        if (value := getattr(pool, field)) > settings.NVKE_MAX_POOL_NODES:
            raise DomainError(
                f"{field} {value} is above the platform's limit of {settings.NVKE_MAX_POOL_NODES} nodes "
                "per pool.",
                field=field,
                code="too_many_nodes",
                limit=settings.NVKE_MAX_POOL_NODES,
            )
    if not 1 <= pool.scale_down_delay_s <= MAX_SCALE_DOWN_DELAY_S:
        raise DomainError(
            f"scale_down_delay_s {pool.scale_down_delay_s} must lie within 1 and {MAX_SCALE_DOWN_DELAY_S}.",
            field="scale_down_delay_s",
            code="out_of_bounds",
        )
    if error := budget_error(pool.upgrade_max_unavailable, pool.upgrade_max_surge):
        raise DomainError(f"upgrade_{error[1]}", field=f"upgrade_{error[0]}")
    if not pool.min_nodes <= pool.node_count <= pool.max_nodes:
        raise DomainError(
            f"node_count {pool.node_count} must lie within min_nodes {pool.min_nodes} and max_nodes "
            f"{pool.max_nodes}.",
            field="node_count",
            code="out_of_bounds",
        )
    model = pool.gpu_model
    if pool.gpus_per_node > model.max_gpus_per_node:
        raise DomainError(
            f"{model.display_name} nodes carry at most {model.max_gpus_per_node} GPUs.", field="gpus_per_node"
        )
    if refusal := sharing_refusal(model, pool.sharing_mode):
        raise Incompatible(refusal.message, field="sharing_mode", code=refusal.rule)
    if pool.cluster.attached and (why := dra_driver.pool_refusal(pool.cluster.observed, pool.sharing_mode)):
        raise Incompatible(why, field="sharing_mode", code="dra_driver_feature_gate")
    if pool.node_selector and not pool.cluster.attached:
        raise DomainError(
            "node_selector applies only to an attached cluster's pools: NVKE makes the nodes of the others.",
            field="node_selector",
        )
    for key, value in pool.node_selector.items():
        if not (LABEL_KEY.fullmatch(key) and LABEL_VALUE.fullmatch(value)):
            raise DomainError(
                f"{key}={value} is not a valid label.", field="node_selector", code="invalid_label"
            )
    if pool.sharing_mode != SharingMode.MIG and pool.mig_layout:
        raise DomainError("mig_layout applies only to sharing_mode mig.", field="mig_layout")
    if refusal := mig_layout_refusal(model, pool.mig_layout):
        raise Incompatible(refusal.message, field="mig_layout", code=refusal.rule)
    sharing.validate_policy(pool)
    if refusals := driver_refusals(pool.driver_release, model, pool.sharing_mode):
        raise Incompatible(
            refusals[0].message,
            field="driver_release",
            code=refusals[0].rule,
            rules=[{"rule": r.rule, "message": r.message} for r in refusals],
        )
    if pool.node_image and (
        refusals := image_refusals(pool.node_image, pool.driver_release, pool.sharing_mode)
    ):
        raise Incompatible(
            refusals[0].message,
            field="node_image",
            code=refusals[0].rule,
            rules=[{"rule": r.rule, "message": r.message} for r in refusals],
        )


def new_pool(*, context: TenantContext, cluster: Cluster, **fields) -> NodePool:
    """The pool `create_pool` would save, validated (a DomainError naming the field) and not saved: a
    form asks its questions about a pool that is otherwise fine."""
    if cluster.status in (Cluster.Status.DELETING, Cluster.Status.FAILED):
        raise Conflict(f"Cluster {cluster.name} is {cluster.status}; it takes no new pools.", field="cluster")
    pool = NodePool(tenant=context.tenant, cluster=cluster, status=NodePool.Status.PROVISIONING, **fields)
    if cluster.kubernetes_version:  # a new pool's machines: the control plane's version, the default image
        pool.kubernetes_version = cluster.kubernetes_version.version
        if "node_image" not in fields:
            pool.node_image = NodeImage.objects.filter(is_default=True, enabled=True).first()
    sharing.apply_mode_defaults(pool, set(fields))
    validate_pool(pool)
    return pool


def create_pool(*, context: TenantContext, cluster: Cluster, **fields) -> NodePool:
    pool = new_pool(context=context, cluster=cluster, **fields)
    duplicate = Conflict(
        f"Cluster {cluster.name} already has a pool named {pool.name!r}.", field="name", code="duplicate"
    )
    if NodePool.objects.filter(cluster=cluster, name=pool.name).exists():
        raise duplicate
    try:
        with transaction.atomic():
            quotas.check_pool(pool)
            pool.set_condition("Ready", False, "Provisioning", f"Creating {pool.node_count} nodes.")
            pool.save()
            publish_pool(pool)
            jobs.enqueue("nodepools.tasks.reconcile_pool", pool.pk)
    except IntegrityError:  # a concurrent create won the name
        raise duplicate from None
    return pool


def update_pool(pool: NodePool, **changes) -> NodePool:
    unknown = set(changes) - set(MUTABLE_FIELDS)
    if unknown:
        field = sorted(unknown)[0]
        raise DomainError(f"{field} is fixed when the pool is created.", field=field, code="immutable")
    with transaction.atomic():
        pool = NodePool.objects.select_for_update().select_related("gpu_model", "cluster").get(pk=pool.pk)
        if pool.status == NodePool.Status.DELETING:
            raise Conflict(f"Pool {pool.name} is being deleted.", code="deleting")
        mode_changed = changes.get("sharing_mode", pool.sharing_mode) != pool.sharing_mode
        for name, value in changes.items():
            setattr(pool, name, value)
        if mode_changed:  # a new mode brings its own sharing policy, unless the change sets one
            sharing.apply_mode_defaults(pool, set(changes))
        validate_pool(pool)
        if "max_nodes" in changes:
            quotas.check_pool(pool)
        if "node_count" in changes:
            pool.status = NodePool.Status.SCALING
            pool.set_condition("Ready", False, "Scaling", f"Scaling to {pool.node_count} nodes.")
        pool.save()
        publish_pool(pool)
        jobs.enqueue("nodepools.tasks.reconcile_pool", pool.pk)
        if pool.autoscaling:  # pending claims may fit its new bounds at once
            jobs.enqueue("nodepools.tasks.autoscale_cluster", pool.cluster_id)
    return pool


def delete_pool(pool: NodePool) -> NodePool:
    with transaction.atomic():
        pool = NodePool.objects.select_for_update().get(pk=pool.pk)
        pool.status = NodePool.Status.DELETING
        pool.set_condition("Ready", False, "Deleting", "Removing the pool's nodes.")
        pool.save()
        publish_pool(pool)
        jobs.enqueue("nodepools.tasks.reconcile_pool", pool.pk)
    return pool


VERSION_FIELDS = ("driver_release", "kubernetes_version", "node_image")


def complete_upgrade(pool_id: int, **versions) -> None:
    """A pool's driver, Kubernetes version or node image once an upgrade run has moved every node to it.
    No audit entry of its own: the run's entry and its conditions record the change."""
    assert versions and set(versions) <= set(VERSION_FIELDS), versions
    NodePool.objects.filter(pk=pool_id).update(**versions)


def pool_spec(pool: NodePool) -> PoolSpec:
    model = pool.gpu_model
    return PoolSpec(
        cluster=cluster_key(pool.cluster),
        region=pool.cluster.region.name if pool.cluster.region else "",
        name=pool.name,
        gpu_model=model.name,
        gpu_memory_mib=model.memory_mib,
        gpus_per_node=pool.gpus_per_node,
        nvlink=model.nvlink,
        driver_version=pool.driver_release.version,
        cpu_millicores_per_node=model.host_cpus_per_gpu * pool.gpus_per_node * 1000,
        memory_mib_per_node=model.host_memory_gib_per_gpu * pool.gpus_per_node * 1024,
        labels={"nvke.io/pool": pool.name, "nvke.io/sharing-mode": pool.sharing_mode},
        gpu_product=model.product_name,
        node_selector=pool.node_selector,
        kubernetes_version=pool.new_machines.get("kubernetes_version", pool.kubernetes_version),
        node_image=pool.new_machines.get("node_image", pool.node_image.name if pool.node_image else ""),
        min_nodes=pool.min_nodes,
        max_nodes=pool.max_nodes,
        remove_first=tuple(pool.surge_remove)
        + ((pool.scale_down_node,) if pool.scale_down_phase in TAKING_OUT else ()),
    )


def reconcile(pool_id: int) -> None:
    """One level-triggered step: compare desired and actual nodes, act once, record the outcome."""
    pool = (
        NodePool.objects.select_related(
            "cluster__region", "cluster__kubernetes_version", "gpu_model", "driver_release", "node_image"
        )
        .filter(pk=pool_id)
        .first()
    )
    if pool is None:
        return
    infrastructure = cluster_infrastructure(pool.cluster)
    if pool.status == NodePool.Status.DELETING:
        infrastructure.delete_pool(cluster_key(pool.cluster), pool.name)
        with transaction.atomic():
            publish_pool(pool, "pool.deleted")
            pool.delete()
        return
    if pool.cluster.status != Cluster.Status.RUNNING:
        return  # the cluster's provisioning re-queues its pools when it is up
    cap = capacity.pool_cap(pool)
    try:
        result = infrastructure.scale_pool(pool_spec(pool), cap.nodes + pool.surge_nodes)
        failure = None
    except ProviderError as error:
        failure, result = error, None
    nodes = cluster_operations(pool.cluster).list_nodes(pool.name)
    with transaction.atomic():
        pool = NodePool.objects.select_for_update().filter(pk=pool_id).first()
        if pool is None or pool.status == NodePool.Status.DELETING:
            return
        sync_nodes(pool, nodes)
        if failure:
            pool.status, pool.status_reason, pool.status_message = "failed", failure.reason, failure.message
            pool.set_condition("Ready", False, failure.reason, failure.message)
        elif not result.complete:
            pool.status, pool.status_reason, pool.status_message = "pending", result.reason, result.message
            pool.set_condition("Ready", False, result.reason, result.message)
        elif cap.message:
            pool.status, pool.status_reason, pool.status_message = "pending", "FairShare", cap.message
            pool.set_condition("Ready", False, "FairShare", cap.message)
        else:
            pool.status, pool.status_reason, pool.status_message = "ready", "", ""
            pool.set_condition("Ready", True, "NodesReady", f"{result.nodes} of {result.wanted} nodes ready.")
        pool.save()
        publish_pool(pool)
