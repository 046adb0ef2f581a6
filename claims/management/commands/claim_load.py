"""Create many claims in a cluster through the service path, as fast as one process can, and print
what happened as JSON. Several of these run at once in the race test and the service benchmark."""

import json
import random
import sys
import time

from django.core.management.base import BaseCommand
from django.db import connection

from catalog.models import SharingMode
from claims.allocator import create_claim
from claims.models import Claim
from clusters.models import Cluster
from nvke.tenancy.context import TenantContext


def shapes_for(cluster: Cluster) -> list[dict]:
    """Claim shapes that fit the cluster's pools: fractions, whole GPUs, MIG slices."""
    modes = set(cluster.node_pools.values_list("sharing_mode", flat=True))
    shapes = []
    if modes & {SharingMode.FRACTIONAL, SharingMode.TIME_SLICING, SharingMode.MPS}:
        shapes += [
            {"kind": "fraction", "gpu_memory_mib": mib, "compute_percent": pct}
            for mib, pct in [(2048, 10), (4096, 25), (8192, 50), (1024, 5), (16384, 30)]
        ]
        # A ceiling above its guarantee: where ceilings may oversubscribe, the guarantees still must fit.
        shapes.append(
            {"kind": "fraction", "gpu_memory_mib": 2048, "compute_percent": 60, "guaranteed_percent": 30}
        )
    if modes & {SharingMode.EXCLUSIVE}:
        shapes += [{"kind": "whole", "gpus": n} for n in (1, 1, 2)]
    if SharingMode.MIG in modes:
        profiles = cluster.node_pools.filter(sharing_mode="mig").values_list(
            "gpu_model__mig_profiles__name", flat=True
        )
        shapes += [{"kind": "mig", "mig_profile": p} for p in profiles if p and "+me" not in p]
    return shapes


class Command(BaseCommand):
    help = "Create N claims in a cluster through the allocation service; print counts and timing as JSON."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", type=int, required=True)
        parser.add_argument("--claims", type=int, default=100)
        parser.add_argument("--prefix", default="load")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--queue", action="store_true", help="queue the claims for the allocator queue")
        parser.add_argument(
            "--wait-for-go",
            action="store_true",
            help='print "ready" and the database session\'s process id, start when a line arrives on '
            "stdin (so several loaders start together), and after the report wait for stdin to close (so "
            "the session's CPU can be read)",
        )

    def handle(
        self,
        *args,
        cluster: int,
        claims: int,
        prefix: str,
        seed: int,
        wait_for_go: bool,
        queue: bool,
        **options,
    ):
        # The tenant as a request's context has it: with its quota, read in the same query.
        target = Cluster.objects.select_related("tenant__quota").get(pk=cluster)
        context = TenantContext(target.tenant, "owner")
        rng = random.Random(seed)
        shapes = shapes_for(target)
        if wait_for_go:  # line up with the other loaders, Django's start-up done
            self.stdout.write(f"ready {_backend_pid()}")
            self.stdout.flush()
            sys.stdin.readline()
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(claims):
            create_claim(
                context=context,
                cluster=target,
                name=f"{prefix}-{i}",
                cpu_milli=500,
                host_memory_mib=1024,
                place=not queue,
                **rng.choice(shapes),
            )
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        mine = Claim.objects.filter(cluster=target, name__startswith=f"{prefix}-")
        self.stdout.write(
            json.dumps(
                {
                    "claims": claims,
                    "allocated": mine.filter(status=Claim.Status.ALLOCATED).count(),
                    "pending": mine.filter(status=Claim.Status.PENDING).count(),
                    "seconds": round(elapsed, 3),
                    "cpu_seconds": round(cpu, 3),
                    "finished_at": time.time(),
                }
            )
        )
        if wait_for_go:
            self.stdout.flush()
            sys.stdin.read()


def _backend_pid() -> int | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]
