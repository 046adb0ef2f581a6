"""Reads of the fleet overview: each GPU model's capacity held by claims and free, and the clusters
that need someone to look (failed, pools short of nodes, pending claims, sick nodes or GPUs)."""

from dataclasses import dataclass, field

from django.db.models import Count, Q, Sum

from claims.models import Claim, GpuShare
from clusters.models import Cluster
from nodepools.models import Gpu, Node, NodePool
from nvke.tenancy.context import TenantContext

from .snapshot import css_percent


@dataclass(frozen=True)
class ModelCapacity:
    name: str
    display_name: str
    gpus: int
    healthy: int
    memory_mib: int
    memory_held_mib: int
    compute_held_milli: int  # thousandths of a GPU, summed over the model's GPUs

    @property
    def memory_free_mib(self) -> int:
        return max(self.memory_mib - self.memory_held_mib, 0)

    @property
    def memory_width(self) -> str:
        return css_percent(self.memory_held_mib / (self.memory_mib or 1))

    @property
    def compute_held(self) -> str:
        """In GPUs: 2.5 of 16."""
        return f"{self.compute_held_milli / 1000:g}"

    @property
    def compute_free(self) -> str:
        return f"{max(self.gpus * 1000 - self.compute_held_milli, 0) / 1000:g}"

    @property
    def compute_width(self) -> str:
        return css_percent(self.compute_held_milli / ((self.gpus * 1000) or 1))


def capacity_by_model(context: TenantContext) -> list[ModelCapacity]:
    """The tenant's GPUs per model: count, healthy, memory, and what allocated claims hold of it."""
    model = "node__pool__gpu_model"
    gpus = (
        Gpu.objects.restrict(context)
        .values(f"{model}__name", f"{model}__display_name")
        .annotate(count=Count("pk"), memory=Sum("memory_mib"), healthy=Count("pk", filter=Q(healthy=True)))
        .order_by(f"{model}__name")
    )
    held = {
        row["gpu__node__pool__gpu_model__name"]: row
        for row in GpuShare.objects.filter(
            gpu__tenant=context.tenant, allocation__claim__status=Claim.Status.ALLOCATED
        )
        .values("gpu__node__pool__gpu_model__name")
        .annotate(memory=Sum("memory_mib"), compute=Sum("guaranteed_milli"))
        .order_by()
    }
    return [
        ModelCapacity(
            name=row[f"{model}__name"],
            display_name=row[f"{model}__display_name"],
            gpus=row["count"],
            healthy=row["healthy"],
            memory_mib=row["memory"],
            memory_held_mib=held.get(row[f"{model}__name"], {}).get("memory") or 0,
            compute_held_milli=held.get(row[f"{model}__name"], {}).get("compute") or 0,
        )
        for row in gpus
    ]


@dataclass
class Attention:
    cluster: Cluster
    pools: list[NodePool] = field(default_factory=list)  # pending or failed, with their reasons
    problems: list[str] = field(default_factory=list)  # one line each


def _count(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def clusters_needing_attention(context: TenantContext) -> list[Attention]:
    """Clusters with something wrong, worst first: failed, then by how many problems. A fixed number of
    queries, whatever the fleet's size."""
    clusters = {c.pk: c for c in Cluster.objects.restrict(context).exclude(status=Cluster.Status.DELETING)}
    found: dict[int, Attention] = {}

    def note(cluster_id: int) -> Attention:
        return found.setdefault(cluster_id, Attention(clusters[cluster_id]))

    for cluster in clusters.values():
        if cluster.status == Cluster.Status.FAILED:
            reason = f"{cluster.status_reason}: {cluster.status_message}" if cluster.status_reason else ""
            note(cluster.pk).problems.append(f"Cluster failed{' — ' + reason if reason else ''}")
    pools = NodePool.objects.restrict(context).filter(
        cluster_id__in=clusters, status__in=[NodePool.Status.PENDING, NodePool.Status.FAILED]
    )
    for pool in pools:
        note(pool.cluster_id).pools.append(pool)
    grouped = [
        (
            Claim.objects.restrict(context).filter(status=Claim.Status.PENDING),
            "cluster_id",
            "pending claim",
            "pending claims",
        ),
        (
            Node.objects.restrict(context).filter(status=Node.Status.NOT_READY),
            "pool__cluster_id",
            "node not ready",
            "nodes not ready",
        ),
        (
            Gpu.objects.restrict(context).filter(healthy=False),
            "node__pool__cluster_id",
            "unhealthy GPU",
            "unhealthy GPUs",
        ),
    ]
    for queryset, cluster_field, one, many in grouped:
        counts = (
            queryset.filter(**{f"{cluster_field}__in": clusters})
            .values(cluster_field)
            .annotate(n=Count("pk"))
        )
        for row in counts.order_by():
            note(row[cluster_field]).problems.append(_count(row["n"], one, many))
    return sorted(
        found.values(),
        key=lambda a: (
            a.cluster.status != Cluster.Status.FAILED,
            -(len(a.pools) + len(a.problems)),
            a.cluster.name,
        ),
    )
