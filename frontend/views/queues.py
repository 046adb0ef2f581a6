"""Queue pages: a cluster's queues, and a queue's page (nominal, used, borrowed, lent and available per
GPU model; pending claims by priority). Queues are made and changed through the API or the admin."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from claims.allocator.admission import standing
from claims.models import Queue
from clusters.models import Cluster
from nvke.tenancy.context import TenantContext

from .shared import tenant_view


@tenant_view
def queue_list(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.restrict(context), pk=pk)
    queues = list(Queue.objects.restrict(context).filter(cluster=cluster).order_by("cohort", "name"))
    standings = standing(queues)
    for queue in queues:
        queue.standing = standings[queue.pk]
    return render(request, "frontend/queue_list.html", {"cluster": cluster, "queues": queues})


@tenant_view
def queue_detail(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    queue = get_object_or_404(Queue.objects.restrict(context).select_related("cluster"), pk=pk)
    cohort = list(Queue.objects.filter(cluster_id=queue.cluster_id))
    queue.standing = standing(cohort)[queue.pk]
    peers = [q for q in cohort if queue.cohort and q.cohort == queue.cohort and q.pk != queue.pk]
    return render(
        request, "frontend/queue_detail.html", {"queue": queue, "cluster": queue.cluster, "peers": peers}
    )
