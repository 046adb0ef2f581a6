"""The simulated fleet's telemetry: one sample per GPU per tick, driven by the claims on each GPU.

Each claim has a usage profile (ClaimScaling.profile, steady when unset) giving its demand in % of
what it requested; its usage is that demand over the share it holds now (capped at 100 %), so a grown
claim's usage falls. A GPU's utilisation is its claims' usage weighted by their compute shares."""

import math
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from claims.models import Claim, GpuShare
from nodepools.models import Gpu

from . import store
from .models import ClaimScaling

BURST_PERIOD_S, BURST_S = 60, 10  # bursty: 10 s at 130 % of the request every minute, else 40 %
NODES_PER_ROUND_TRIP = 100
RELOAD_EVERY_S = 10  # claims come and go: re-read the layout now and then
GROWTH_PER_S = 20 / 60  # growing: from 50 % of the request, +20 points a minute, up to 250 %


def demand(profile: str, now: float, since: float) -> float:
    """A claim's demand in % of its request."""
    if profile == ClaimScaling.Profile.BURSTY:
        return 130.0 if now % BURST_PERIOD_S < BURST_S else 40.0
    if profile == ClaimScaling.Profile.GROWING:
        return min(250.0, 50.0 + GROWTH_PER_S * max(0.0, now - since))
    return 60.0


@dataclass
class GpuLoad:
    id: int
    node_id: int
    memory_mib: int
    max_power_w: int
    shares: list[tuple] = field(default_factory=list)  # (claim id, compute share 0..1, memory MiB, profile…)


def layout(gpu_filter: dict | None = None) -> list[GpuLoad]:
    """The GPUs and the claims on them, in three queries."""
    gpus = {
        pk: GpuLoad(pk, node_id, memory, power)
        for pk, node_id, memory, power in Gpu.objects.filter(**(gpu_filter or {})).values_list(
            "pk", "node_id", "memory_mib", "node__pool__gpu_model__max_power_w"
        )
    }
    profiles = dict(ClaimScaling.objects.values_list("claim_id", "profile"))
    requested = dict(ClaimScaling.objects.values_list("claim_id", "requested_compute_percent"))
    rows = GpuShare.objects.filter(gpu_id__in=gpus).values_list(
        "gpu_id",
        "allocation__claim_id",
        "allocation__claim__kind",
        "allocation__claim__allocated_at",
        "compute_milli",
        "memory_mib",
        "exclusive",
        "mig_size",
    )
    for gpu_id, claim_id, kind, allocated_at, compute, memory, exclusive, mig_size in rows:
        share = compute / 1000 if compute else (1.0 if exclusive else (mig_size or 2) / 8)
        request = (
            requested.get(claim_id, compute / 10) / 100 if kind == Claim.Kind.FRACTION and compute else share
        )
        gpus[gpu_id].shares.append(
            (
                claim_id if kind == Claim.Kind.FRACTION and compute else None,
                share,
                request,
                memory,
                profiles.get(claim_id, ClaimScaling.Profile.STEADY),
                allocated_at.timestamp() if allocated_at else 0.0,
            )
        )
    return list(gpus.values())


def sample(gpu: GpuLoad, now: float) -> store.Sample:
    util, memory, claims = 0.0, 0.0, {}
    for claim_id, share, request, share_memory, profile, since in gpu.shares:
        usage = min(100.0, demand(profile, now, since) * request / share) if share else 0.0
        util += share * usage
        memory += share_memory * (0.3 + 0.6 * usage / 100)
        if claim_id is not None:
            claims[claim_id] = round(usage, 1)
    util = min(100.0, util + 2 * math.sin(now / 7 + gpu.id))  # a little noise around the claims' load
    util = max(0.0, util)
    values = {
        "util": round(util, 1),
        "mem": round(min(memory, gpu.memory_mib)),
        "temp": round(32 + 0.5 * util, 1),
        "power": round(gpu.max_power_w * (0.15 + 0.85 * util / 100), 1),
        "sm": round(1100 + 8 * util),
        "xid": 0,
    }
    return store.Sample(gpu.id, now, values, claims)


def tick(now: float, gpus: list[GpuLoad] | None = None) -> int:
    """Write one sample per GPU (and a heartbeat per node). Returns how many samples."""
    gpus = layout() if gpus is None else gpus
    by_node: dict[int, list[store.Sample]] = defaultdict(list)
    for gpu in gpus:
        by_node[gpu.node_id].append(sample(gpu, now))
    batches = list(by_node.items())
    for i in range(0, len(batches), NODES_PER_ROUND_TRIP):
        store.write_many(batches[i : i + NODES_PER_ROUND_TRIP], now)
    return len(gpus)


def play(interval: float, gpu_filter: dict | None = None) -> Iterator[tuple[float, int]]:
    """Tick every `interval` seconds, for ever: yields (when the tick started, its sample count) after
    each; the caller's work between two ticks is part of the interval."""
    loaded_at, gpus = 0.0, []
    while True:
        started = time.time()
        if started - loaded_at > RELOAD_EVERY_S:
            gpus, loaded_at = layout(gpu_filter), started
        yield started, tick(started, gpus)
        time.sleep(max(0.0, interval - (time.time() - started)))
