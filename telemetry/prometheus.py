"""`/metrics`: fleet and allocation figures in the Prometheus text exposition format (version 0.0.4).

Fleet-wide, so it is not for tenants: it answers only with `Authorization: Bearer <NVKE_METRICS_TOKEN>`,
and is off (404) while that setting is empty."""

import hmac

from django.conf import settings
from django.db.models import Count, Sum
from django.http import Http404, HttpRequest, HttpResponse

from clusters.models import Cluster
from nodepools.models import Claim, Gpu, GpuShare, Node

from . import store
from .models import TelemetryEvent

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            rendered = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{rendered}}} {value}" if rendered else f"{name} {value}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render() -> str:
    out = Exposition()
    gpus = Gpu.objects.values("node__pool__gpu_model__name", "healthy").annotate(
        n=Count("pk"), mib=Sum("memory_mib")
    )
    out.metric(
        "nvke_gpus",
        "gauge",
        "GPUs in the fleet by model and health.",
        [
            ({"model": r["node__pool__gpu_model__name"], "healthy": str(r["healthy"]).lower()}, r["n"])
            for r in gpus
        ],
    )
    out.metric(
        "nvke_gpu_memory_mib",
        "gauge",
        "GPU memory in the fleet (MiB) by model.",
        [
            ({"model": r["node__pool__gpu_model__name"], "healthy": str(r["healthy"]).lower()}, r["mib"])
            for r in gpus
        ],
    )
    nodes = Node.objects.values("status").annotate(n=Count("pk"))
    out.metric("nvke_nodes", "gauge", "Nodes by status.", [({"status": r["status"]}, r["n"]) for r in nodes])
    clusters = Cluster.objects.values("status").annotate(n=Count("pk"))
    out.metric(
        "nvke_clusters", "gauge", "Clusters by status.", [({"status": r["status"]}, r["n"]) for r in clusters]
    )
    claims = Claim.objects.values("kind", "status").annotate(n=Count("pk"))
    out.metric(
        "nvke_claims",
        "gauge",
        "GPU claims by kind and status.",
        [({"kind": r["kind"], "status": r["status"]}, r["n"]) for r in claims],
    )
    shares = GpuShare.objects.aggregate(memory=Sum("memory_mib"), compute=Sum("compute_milli"))
    out.metric(
        "nvke_allocated_gpu_memory_mib",
        "gauge",
        "GPU memory allocated to claims (MiB).",
        [({}, shares["memory"] or 0)],
    )
    out.metric(
        "nvke_allocated_gpu_compute",
        "gauge",
        "GPU compute allocated to claims, in GPUs (1.0 = one whole GPU's compute).",
        [({}, (shares["compute"] or 0) / 1000)],
    )
    latest = store.latest(list(Gpu.objects.values_list("pk", flat=True)))
    utils = [s["util"] for s in latest.values() if "util" in s]
    out.metric("nvke_gpus_reporting", "gauge", "GPUs with a latest telemetry sample.", [({}, len(utils))])
    out.metric(
        "nvke_gpu_utilization_avg_percent",
        "gauge",
        "Average utilization of the GPUs reporting.",
        [({}, round(sum(utils) / len(utils), 2) if utils else 0)],
    )
    events = TelemetryEvent.objects.values("kind").annotate(n=Count("pk"))
    out.metric(
        "nvke_telemetry_decisions",
        "gauge",
        "Telemetry decisions on record by kind.",
        [({"kind": r["kind"]}, r["n"]) for r in events],
    )
    return out.text()


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404("Metrics are off: set NVKE_METRICS_TOKEN.")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme != "Bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        response = HttpResponse(
            "Send Authorization: Bearer <metrics token>.\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(render(), content_type=CONTENT_TYPE)
