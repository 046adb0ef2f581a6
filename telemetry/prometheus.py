"""`/metrics`: fleet and allocation figures in the Prometheus text exposition format (version 0.0.4),
written by prometheus_client from a collector that reads the database and Redis at each scrape.

Fleet-wide, so it is not for tenants: it answers only with `Authorization: Bearer <NVKE_METRICS_TOKEN>`,
and is off (404) while that setting is empty."""

import hmac
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Sum
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from claims.models import Claim, GpuShare
from clusters.models import Cluster
from nodepools.models import Gpu, Node

from . import store
from .models import TelemetryEvent

# What generate_latest writes; spelled out because prometheus_client's CONTENT_TYPE_LATEST moved to the
# 1.0.0 text format in 0.22 and the scrapers we know of expect 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _gauge(name: str, help_text: str, labels: list[str], rows: list[tuple[list[str], float]]):
    family = GaugeMetricFamily(name, help_text, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


class FleetCollector(Collector):
    """Every figure is computed at scrape time: nothing is kept between scrapes in the process."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gpus = list(
            Gpu.objects.values("node__pool__gpu_model__name", "healthy").annotate(
                n=Count("pk"), mib=Sum("memory_mib")
            )
        )

        def by_model(field: str) -> list[tuple[list[str], float]]:
            return [([r["node__pool__gpu_model__name"], str(r["healthy"]).lower()], r[field]) for r in gpus]

        yield _gauge(
            "nvke_gpus", "GPUs in the fleet by model and health.", ["model", "healthy"], by_model("n")
        )
        yield _gauge(
            "nvke_gpu_memory_mib",
            "GPU memory in the fleet (MiB) by model.",
            ["model", "healthy"],
            by_model("mib"),
        )
        nodes = Node.objects.values("status").annotate(n=Count("pk"))
        yield _gauge("nvke_nodes", "Nodes by status.", ["status"], [([r["status"]], r["n"]) for r in nodes])
        clusters = Cluster.objects.values("status").annotate(n=Count("pk"))
        yield _gauge(
            "nvke_clusters", "Clusters by status.", ["status"], [([r["status"]], r["n"]) for r in clusters]
        )
        claims = Claim.objects.values("kind", "status").annotate(n=Count("pk"))
        yield _gauge(
            "nvke_claims",
            "GPU claims by kind and status.",
            ["kind", "status"],
            [([r["kind"], r["status"]], r["n"]) for r in claims],
        )
        shares = GpuShare.objects.aggregate(memory=Sum("memory_mib"), compute=Sum("compute_milli"))
        yield GaugeMetricFamily(
            "nvke_allocated_gpu_memory_mib",
            "GPU memory allocated to claims (MiB).",
            value=shares["memory"] or 0,
        )
        yield GaugeMetricFamily(
            "nvke_allocated_gpu_compute",
            "GPU compute allocated to claims, in GPUs (1.0 = one whole GPU's compute).",
            value=(shares["compute"] or 0) / 1000,
        )
        latest = store.latest(list(Gpu.objects.values_list("pk", flat=True)))
        utils = [s["util"] for s in latest.values() if "util" in s]
        yield GaugeMetricFamily(
            "nvke_gpus_reporting", "GPUs with a latest telemetry sample.", value=len(utils)
        )
        yield GaugeMetricFamily(
            "nvke_gpu_utilization_avg_percent",
            "Average utilization of the GPUs reporting.",
            value=round(sum(utils) / len(utils), 2) if utils else 0,
        )
        counts = store.ingest_counts()
        samples = CounterMetricFamily(
            "nvke_telemetry_ingest_samples",
            "Samples posted by node agents, by every web process: accepted (stored), late (accepted more "
            "than 10 s after their time), rejected (in refused batches).",
            labels=["outcome"],
        )
        for outcome in ("accepted", "late", "rejected"):
            samples.add_metric([outcome], counts.get(outcome, 0))
        yield samples
        batches = CounterMetricFamily(
            "nvke_telemetry_ingest_batches_rejected",
            "Batches refused: invalid (4xx), unauthorized (node token), overloaded (503, Retry-After), "
            "unavailable (Redis).",
            labels=["reason"],
        )
        for reason in ("invalid", "unauthorized", "overloaded", "unavailable"):
            batches.add_metric([reason], counts.get(f"batches_rejected:{reason}", 0))
        yield batches
        buckets, lag_sum = store.frame_lags()
        yield HistogramMetricFamily(
            "nvke_telemetry_frame_lag_seconds",
            "Live frames sent to dashboards by every web process, by how long after their oldest sample "
            "each was handed to its socket's sender.",
            buckets=buckets,
            sum_value=lag_sum,
        )
        streams = store.stream_counts()
        yield CounterMetricFamily(
            "nvke_telemetry_frames_coalesced",
            "Live frames merged, by every web process, into one their socket had not taken yet (newest "
            "row per GPU kept): the frames slow sockets did not get one by one.",
            value=streams["coalesced"],
        )
        yield CounterMetricFamily(
            "nvke_telemetry_sockets_closed_stalled",
            "Live telemetry sockets dropped (1013) by every web process after not draining for "
            "NVKE_TELEMETRY_STALLED_SOCKET_S.",
            value=streams["stalled"],
        )
        events = TelemetryEvent.objects.values("kind").annotate(n=Count("pk"))
        yield _gauge(
            "nvke_telemetry_decisions",
            "Telemetry decisions on record by kind.",
            ["kind"],
            [([r["kind"]], r["n"]) for r in events],
        )


# auto_describe off (the default): registering must not run the collector's queries at import.
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(FleetCollector())


def render() -> str:
    return generate_latest(REGISTRY).decode()


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
