"""Claims reach the workloads of real clusters: each pass hands the provider every claim of the cluster
as it stands in the allocation log's rows (placed or pending, and where) and records what the cluster
made of it on the claim (`Claim.workload`); GPU requests the provider found that NVKE did not make (a
user's ResourceClaim, a pod with `schedulerName: nvke`) are adopted as claims through the same
allocator as any other, with the same quotas, or refused with the reason said on the object. A claim
whose adopted object was deleted is released. Level-triggered: kube_sync runs a pass whenever the
cluster's watches or the allocation log move, and a repeated pass changes nothing."""

import logging
from collections import defaultdict

from django.db.models import Prefetch

from audit.context import acting_as
from catalog.models import SharingMode
from claims.allocator.groups import adopt_members
from claims.allocator.service import create_claim, release_claim
from claims.models import AllocationEvent, Claim, ClaimGroup, GpuShare
from claims.sizing import mps_environment
from clusters.models import Cluster
from clusters.services import cluster_operations
from nodepools.preflight import enforced_isolation
from nvke.errors import DomainError
from nvke.providers.base import DeviceShare, FoundWorkload, WorkloadClaim, WorkloadReport
from nvke.tenancy.context import TenantContext

log = logging.getLogger(__name__)


def workload_claims(cluster_id: int) -> list[WorkloadClaim]:
    """Every claim of the cluster for the provider, in three queries whatever their number."""
    shares = GpuShare.objects.select_related("gpu").order_by("gpu__index")
    claims = (
        Claim.objects.filter(cluster_id=cluster_id)
        .select_related("allocation__node__pool", "group", "preempted_by")
        .prefetch_related(Prefetch("allocation__shares", queryset=shares))
        .order_by("-priority", "created_at", "pk")  # who holds a GPU that cannot be shared: the first
    )
    return [workload_claim(claim) for claim in claims]


def workload_claim(claim: Claim) -> WorkloadClaim:
    common = dict(
        namespace=claim.namespace,
        name=claim.name,
        source=claim.source,
        kind=claim.kind,
        gpus=claim.gpus,
        group=str(claim.group) if claim.group else "",
        preempted_by=str(claim.preempted_by) if claim.preempted_by else "",
    )
    allocation = getattr(claim, "allocation", None) if claim.status == Claim.Status.ALLOCATED else None
    if allocation is None:
        return WorkloadClaim(**common, pending_reason=claim.pending_reason)
    mode = allocation.node.pool.sharing_mode
    environment = ()
    if mode == SharingMode.MPS and claim.kind == Claim.Kind.FRACTION:
        environment = tuple(mps_environment(allocation.memory_mib, allocation.compute_milli // 10).items())
    return WorkloadClaim(
        **common,
        node=allocation.node.name,
        sharing_mode=mode,
        isolation=enforced_isolation(
            allocation.isolation,
            kind=claim.kind,
            source=claim.source,
            sharing_mode=mode,
            facts=allocation.node.preflight,
        ),
        environment=environment,
        shares=tuple(
            DeviceShare(
                index=share.gpu.index,
                uuid=f"GPU-{share.gpu.uuid}",  # as NVML and the cluster's devices name it
                memory_mib=share.memory_mib,
                ceiling_percent=share.compute_milli // 10,
                guaranteed_percent=share.guaranteed_milli // 10,
                exclusive=share.exclusive,
                mig_profile=share.mig_profile,
                mig_start=share.mig_start,
            )
            for share in allocation.shares.all()
        ),
    )


def log_position(cluster_id: int) -> int | None:
    """The cluster's newest allocation log entry: a workloads pass is due when it moves."""
    entries = AllocationEvent.objects.filter(cluster_id=cluster_id).order_by("-id")
    return entries.values_list("id", flat=True).first()


def sync_workloads(cluster_id: int) -> WorkloadReport:
    """One pass over the cluster's workloads (see the module's docstring)."""
    cluster = Cluster.objects.select_related("tenant").get(pk=cluster_id)
    ops = cluster_operations(cluster)
    with acting_as("cluster workloads"):  # claims it adopts or releases are the cluster's doing
        tenant = cluster.tenant.slug
        report = ops.sync_workloads(workload_claims(cluster_id), tenant=tenant)
        refused = adopt(cluster, report.found)
        if report.found:  # adopted claims are placed already: write them out now rather than next pass
            report = ops.sync_workloads(workload_claims(cluster_id), refused=refused, tenant=tenant)
        record(cluster_id, report)
    return report


def adopt(cluster: Cluster, found: tuple[FoundWorkload, ...]) -> dict[tuple[str, str], str]:
    """Claims for what the provider found; returns why each one not adopted was refused."""
    context = TenantContext(cluster.tenant, "owner")  # the cluster is the tenant's: its requests are
    refused = {}
    gangs: dict[tuple[str, str, int], list[FoundWorkload]] = defaultdict(list)
    for item in found:
        if item.refusal:
            continue  # the provider said why on the object already
        if item.group:
            gangs[(item.namespace, item.group, item.group_min)].append(item)
            continue
        try:
            create_claim(context=context, cluster=cluster, name=item.name, **_request(item))
        except DomainError as error:  # a quota, a request that never fits: said on the object
            refused[(item.namespace, item.name)] = error.message
    for (_, name, minimum), items in gangs.items():
        try:
            adopt_members(
                context=context,
                cluster=cluster,
                name=name,
                min_members=minimum,
                members=[(item.name, _request(item)) for item in items],
            )
        except DomainError as error:  # the whole gang is refused: each pod says why
            refused.update({(item.namespace, item.name): error.message for item in items})
    return refused


def _request(item: FoundWorkload) -> dict:
    """A found request as create_claim's fields."""
    return dict(
        namespace=item.namespace,
        kind=item.kind,
        gpus=item.gpus,
        gpu_memory_mib=item.gpu_memory_mib,
        compute_percent=item.compute_percent,
        mig_profile=item.mig_profile,
        priority=item.priority,
        source=item.source,
    )


def record(cluster_id: int, report: WorkloadReport) -> None:
    """Each claim's workload state, written only where it changed; adopted claims whose object is gone
    are released."""
    states = {(s.namespace, s.name): s for s in report.states}
    emptied: set[int | None] = set()
    for claim in Claim.objects.filter(cluster_id=cluster_id).select_related("cluster"):
        state = states.get((claim.namespace, claim.name))
        if state is None:
            continue
        if state.state == "gone" and claim.source in (Claim.Source.RESOURCE_CLAIM, Claim.Source.POD):
            release_claim(claim)
            emptied.add(claim.group_id)
            continue
        wanted = {"state": state.state, "message": state.message}
        if claim.workload != wanted:
            Claim.objects.filter(pk=claim.pk).update(workload=wanted)
    # An adopted gang whose pods are all gone is gone too (its PodGroup may make new ones: a new group).
    ClaimGroup.objects.filter(pk__in=emptied - {None}, claims__isnull=True).delete()
