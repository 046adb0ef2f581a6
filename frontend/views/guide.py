"""Getting started: from sign-in to a running workload, as steps that show which are done for this
tenant and link to where the next one is taken."""

from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from claims.models import Claim
from clusters.models import Cluster
from nodepools.models import NodePool
from nvke.tenancy.context import TenantContext

from .shared import tenant_view


@dataclass(frozen=True)
class GuideStep:
    title: str
    done: bool
    text: str
    link: str = ""
    link_text: str = ""


@tenant_view
def getting_started(request: HttpRequest, context: TenantContext) -> HttpResponse:
    clusters = Cluster.objects.restrict(context)
    cluster = clusters.order_by("-attached", "pk").first()
    pool = NodePool.objects.restrict(context).filter(cluster=cluster).first() if cluster else None
    claims = Claim.objects.restrict(context).filter(cluster=cluster) if cluster else Claim.objects.none()
    placed = claims.filter(status=Claim.Status.ALLOCATED).order_by("pk").first()
    steps = [
        GuideStep(
            "A cluster",
            cluster is not None,
            "Attach a Kubernetes cluster you run (NVKE reads its GPU nodes and drives their drivers), or "
            "create a simulated one to try NVKE out.",
            reverse("cluster-attach"),
            "Attach a cluster",
        ),
        GuideStep(
            "A GPU node pool",
            pool is not None,
            "A pool is the cluster's nodes of one GPU model: how they share their GPUs (whole, MIG, "
            "time-slicing, MPS, fractions) and its autoscaling bounds.",
            reverse("pool-create", args=[cluster.pk]) if cluster else "",
            "Add a pool",
        ),
        GuideStep(
            "A claim",
            claims.exists(),
            "Ask for whole GPUs, a MIG slice, or a fraction (GPU memory and a compute share). NVKE places it "
            "with little fragmentation and says how it is isolated.",
            reverse("claim-create", args=[cluster.pk]) if cluster else "",
            "Make a claim",
        ),
        GuideStep(
            "A running workload",
            placed is not None and placed.workload.get("state") == "allocated",
            "Label the namespace nvke.io/managed=true and apply the pod on the claim's page: it references "
            "the claim's ResourceClaim (or, without DRA, asks NVKE's scheduler for the same). Pods that ask "
            "for GPUs themselves are placed too.",
            reverse("claim-detail", args=[placed.pk]) if placed else "",
            "Use this claim",
        ),
        GuideStep(
            "Watch it",
            False,
            "Live GPU utilization per pool and GPU, and what each claim holds, also from kubectl "
            "(kubectl get gpuallocations -o wide).",
            reverse("telemetry"),
            "Open telemetry",
        ),
    ]
    return render(request, "frontend/getting_started.html", {"steps": steps, "cluster": cluster})
