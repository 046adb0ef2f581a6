"""What the database-backed benchmarks share: a PostgreSQL database they may empty, the catalog, one
provisioned cluster in the simulator, the fleets of the scale benchmarks and the web servers they
start. Call `ensure_database` before `django.setup()`, the rest after."""

import base64
import os
import sys
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlparse

BIN = Path(sys.executable).parent

# The benchmarks' own key, inherited by the processes they start (without one each process warns that
# secrets use the development key). Their databases hold only the simulator's made-up credentials.
os.environ.setdefault(
    "NVKE_ENCRYPTION_KEY", base64.urlsafe_b64encode(b"nvke benchmarks: not a secret!!!").decode()
)


def web_server(server: str, port: int) -> list[str]:
    """The command of one web process: daphne (the compose file's) or uvicorn (httptools, uvloop)."""
    if server == "daphne":
        return [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "nvke.asgi:application"]
    return [
        *(
            str(BIN / "uvicorn"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--no-proxy-headers",
        ),
        *("--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "nvke.asgi:application"),
    ]


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ensure_database(url: str) -> None:
    """Create the benchmark's database when it does not exist yet."""
    import psycopg
    from psycopg import sql

    name = urlparse(url).path.lstrip("/")
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def fresh_catalog() -> None:
    """Migrated, emptied, the catalog seeded; region inventory large enough never to be the limit."""
    from django.core.management import call_command

    from catalog.models import RegionInventory
    from catalog.seed import seed_catalog

    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    seed_catalog()
    RegionInventory.objects.update(total_gpus=100_000)  # the benchmarks measure software, not capacity


def bench_cluster(tenant, control_plane_nodes: int = 3):
    """A running cluster named "bench" of `tenant` in the simulator."""
    from catalog.models import KubernetesVersion, Region
    from clusters.models import Cluster
    from clusters.services import provision

    cluster = Cluster.objects.create(
        tenant=tenant,
        name="bench",
        kubernetes_version=KubernetesVersion.objects.get(version="1.35"),
        region=Region.objects.get(name="us-east-1"),
        control_plane_nodes=control_plane_nodes,
    )
    provision(cluster.pk)
    cluster.refresh_from_db()
    return cluster


def bench_pool(name: str, gpu_model: str, gpus_per_node: int, nodes: int):
    """A fresh catalog, tenant "bench", its cluster (`bench_cluster`) and a pool of `nodes` nodes up to
    `nodes`, on driver 580.105.08, reconciled: (tenant, cluster, pool)."""
    from catalog.models import DriverRelease, GpuModel
    from nodepools.models import NodePool
    from nodepools.services import reconcile
    from nvke.tenancy.models import Tenant

    fresh_catalog()
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    cluster = bench_cluster(tenant)
    pool = NodePool.objects.create(
        tenant=tenant,
        cluster=cluster,
        name=name,
        gpu_model=GpuModel.objects.get(name=gpu_model),
        gpus_per_node=gpus_per_node,
        node_count=nodes,
        min_nodes=0,
        max_nodes=nodes,
        driver_release=DriverRelease.objects.get(version="580.105.08"),
    )
    reconcile(pool.pk)
    return tenant, cluster, pool


def scale_fleet(tenant, nodes: int, claims: int):
    """The fleet of the scale benchmarks: one cluster, half its `nodes` 8-GPU fractional L4 nodes, half
    8-GPU MIG H100 nodes (the simulator's, through the pools' reconcile), and `claims` placed claims:
    fractions of 1–4 GiB on the L4s, 1g.10gb slices on the H100s. Returns the cluster."""
    from django.db import connection

    from catalog.models import DriverRelease, GpuModel
    from claims.allocator import create_claim, place_pending
    from nodepools.models import NodePool
    from nodepools.services import reconcile
    from nvke.tenancy.context import TenantContext

    cluster = bench_cluster(tenant)
    driver = DriverRelease.objects.get(version="580.105.08")
    for name, model, mode, count in [
        ("frac", "l4", "fractional", nodes - nodes // 2),
        ("mig", "h100-sxm5-80gb", "mig", nodes // 2),
    ]:
        pool = NodePool.objects.create(
            tenant=tenant,
            cluster=cluster,
            name=name,
            gpu_model=GpuModel.objects.get(name=model),
            gpus_per_node=8,
            node_count=count,
            min_nodes=0,
            max_nodes=count,
            driver_release=driver,
            sharing_mode=mode,
        )
        reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    for i in range(claims):
        shape = (
            {"kind": "fraction", "gpu_memory_mib": 1024 * (1 + i % 4), "compute_percent": 10}
            if i % 2
            else {"kind": "mig", "mig_profile": "1g.10gb"}
        )
        create_claim(context=context, cluster=cluster, name=f"c{i}", cpu_milli=100, place=False, **shape)
    place_pending(cluster.pk)
    with connection.cursor() as cursor:  # statistics, as autovacuum would have them by now
        cursor.execute("ANALYZE")
    return cluster


def telemetry_fleet(gpus: int, tenants: int) -> list[dict]:
    """The telemetry benchmarks' fleet on an emptied database: `tenants` tenants with one cluster and one pool
    of 8-GPU H100 nodes each, `gpus` GPUs in all (half the pools with a rescaling policy of their own);
    returns per tenant its user's session cookie."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from catalog.models import DriverRelease, GpuModel, KubernetesVersion, Region
    from catalog.seed import seed_catalog
    from clusters.models import Cluster
    from nodepools.models import Gpu, Node, NodePool
    from nvke.tenancy.models import Membership, Tenant
    from telemetry import policy
    from telemetry.models import PoolRescaling

    call_command("flush", interactive=False, verbosity=0)
    seed_catalog()
    model = GpuModel.objects.get(name="h100-sxm5-80gb")
    driver = DriverRelease.objects.filter(architectures=model.architecture).first()
    version, region = KubernetesVersion.objects.first(), Region.objects.first()
    nodes_per_tenant = -(-gpus // (8 * tenants))
    sessions = []
    for t in range(tenants):
        tenant = Tenant.objects.create(name=f"Bench {t}", slug=f"bench-{t}")
        user = get_user_model().objects.create_user(f"bench-{t}", password="x")
        Membership.objects.create(tenant=tenant, user=user, role="viewer")
        cluster = Cluster.objects.create(
            tenant=tenant,
            name="c",
            kubernetes_version=version,
            region=region,
            control_plane_nodes=1,
            status="running",
        )
        pool = NodePool.objects.create(
            tenant=tenant,
            cluster=cluster,
            name="p",
            gpu_model=model,
            gpus_per_node=8,
            node_count=nodes_per_tenant,
            max_nodes=nodes_per_tenant,
            driver_release=driver,
            status="ready",
        )
        if t % 2:
            # Half the pools have a rescaling policy of their own, with the default values: the samples
            # take the same Redis commands either way, and ingestion looks both kinds up.
            PoolRescaling.objects.create(tenant=tenant, pool=pool, **asdict(policy.default()))
        nodes = Node.objects.bulk_create(
            Node(
                tenant=tenant,
                pool=pool,
                name=f"b{t}-n{i}",
                driver_version=driver.version,
                cpu_millicores=128000,
                memory_mib=2 << 20,
            )
            for i in range(nodes_per_tenant)
        )
        Gpu.objects.bulk_create(
            Gpu(tenant=tenant, node=node, index=i, memory_mib=model.memory_mib)
            for node in nodes
            for i in range(8)
        )
        browser = Client()
        browser.force_login(user)
        sessions.append({"tenant": tenant.pk, "cookie": browser.cookies["sessionid"].value})
    # Trim to exactly `gpus` GPUs.
    extra = Gpu.objects.order_by("-pk").values_list("pk", flat=True)[: Gpu.objects.count() - gpus]
    Gpu.objects.filter(pk__in=list(extra)).delete()
    return sessions
