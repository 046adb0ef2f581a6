import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from catalog.models import DriverRelease, GpuModel, KubernetesVersion, Region
from catalog.seed import seed_catalog
from clusters.models import Cluster
from clusters.services import provision
from nodepools.models import NodePool
from nvke.celery import app as celery_app
from nvke.tenancy.models import ApiToken, Membership, Tenant
from tests.integration.processes import (
    BIN,
    Process,
    database_url_of_this_run,
    free_port,
    port_open,
    process_env,
)

pytest_plugins = ["tests.kubeapi.fixtures"]  # kubeapi, kube_client: the fake Kubernetes API server


def pytest_collection_modifyitems(config, items):
    """On SQLite (the embedded default's twins of the write paths: scripts/dev test-sqlite), tests marked
    `postgresql` are skipped with the marker's reason."""
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        return
    for item in items:
        if marker := item.get_closest_marker("postgresql"):
            reason = marker.args[0] if marker.args else "needs PostgreSQL"
            item.add_marker(pytest.mark.skip(reason=f"PostgreSQL only: {reason}"))


@pytest.fixture(autouse=True)
def fresh_caches():
    """Every test starts and ends with the per-process caches empty (nvke.caches): they are keyed by
    ids, and ids recur between tests (and runs), on SQLite even within a run."""
    from nvke import caches

    caches.clear_all()
    yield
    caches.clear_all()


@pytest.fixture
def catalog(db):
    seed_catalog()


@pytest.fixture
def make_member(db):
    """make_member(tenant_name, role) -> user in that tenant (tenant created if new)."""

    def make(tenant_name: str = "acme", role: str = "owner", username: str | None = None):
        tenant, _ = Tenant.objects.get_or_create(slug=tenant_name, defaults={"name": tenant_name.title()})
        user = get_user_model().objects.create_user(
            username=username or f"{tenant_name}-{role}-{Membership.objects.count()}",
            password="pw-secret-123",
        )
        Membership.objects.create(tenant=tenant, user=user, role=role)
        return user

    return make


@pytest.fixture
def owner(make_member):
    return make_member("acme", "owner")


@pytest.fixture
def api(owner):
    """An API client acting as an owner of tenant 'acme' (session auth)."""
    client = APIClient()
    client.force_authenticate(owner)
    return client


@pytest.fixture
def client_for():
    """client_for(user) -> API client authenticated as that user; client_for(user, token=True) uses a
    real bearer token."""

    def make(user, token: bool = False):
        client = APIClient()
        if token:
            membership = user.memberships.first()
            _, raw = ApiToken.issue(tenant=membership.tenant, user=user, name="test")
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        else:
            client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def make_cluster(catalog):
    """make_cluster(tenant, name, status): a running cluster is provisioned through the simulator."""

    def make(
        tenant: Tenant, name: str = "prod", status: str = Cluster.Status.RUNNING, region: str = "us-east-1"
    ):
        cluster = Cluster.objects.create(
            tenant=tenant,
            name=name,
            kubernetes_version=KubernetesVersion.objects.get(version="1.35"),
            region=Region.objects.get(name=region),
            control_plane_nodes=1,
            status=Cluster.Status.PROVISIONING if status == Cluster.Status.RUNNING else status,
        )
        if status == Cluster.Status.RUNNING:
            provision(cluster.pk)
            cluster.refresh_from_db()
        return cluster

    return make


@pytest.fixture
def make_pool(catalog):
    def make(
        cluster: Cluster,
        name: str = "gpu",
        gpu_model: str = "l4",
        nodes: int = 2,
        gpus_per_node: int = 4,
        driver: str = "580.105.08",
        sharing_mode: str = "exclusive",
        status: str = NodePool.Status.READY,
        **fields,
    ):
        if cluster.kubernetes_version:
            fields.setdefault("kubernetes_version", cluster.kubernetes_version.version)
        return NodePool.objects.create(
            tenant=cluster.tenant,
            cluster=cluster,
            name=name,
            gpu_model=GpuModel.objects.get(name=gpu_model),
            gpus_per_node=gpus_per_node,
            node_count=nodes,
            min_nodes=0,
            max_nodes=max(nodes, 8),
            driver_release=DriverRelease.objects.get(version=driver),
            sharing_mode=sharing_mode,
            status=status,
            **fields,
        )

    return make


# --- real processes (integration tests) ---


@pytest.fixture
def celery_worker_process(transactional_db):
    """A real `celery worker` process on the Redis broker, working on this test's database.
    While it runs, tasks sent by the test go over Redis instead of running in the test process."""
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    worker = Process(
        [
            str(BIN / "celery"),
            "-A",
            "nvke",
            "worker",
            "-Q",
            "default,provisioning,allocator",
            "-P",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
        ],
        process_env(DATABASE_URL=database_url_of_this_run(), REDIS_URL=settings.REDIS_URL),
    )
    celery_app.conf.task_always_eager = False
    try:
        worker.wait_for_line("ready.")
        yield worker
    finally:
        celery_app.conf.task_always_eager = True
        worker.stop()


ASGI_SERVERS = {
    "daphne": lambda port: [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "nvke.asgi:application"],
    # As production runs it (Dockerfile): the app alone reads X-Forwarded-* (NVKE_TRUSTED_PROXIES).
    "uvicorn": lambda port: [
        *(str(BIN / "uvicorn"), "--host", "127.0.0.1", "--port", str(port)),
        *("--no-proxy-headers", "nvke.asgi:application"),
    ],
}


@pytest.fixture
def serve_asgi(transactional_db):
    """serve_asgi(server="uvicorn", **env): a real ASGI server process (uvicorn, as production runs, or
    daphne) serving the app (HTTP and websockets) on this test's database and Redis, with `env` added;
    stopped after."""
    started = []

    def start(server: str = "uvicorn", **env: str) -> Process:
        port = free_port()
        process = Process(
            ASGI_SERVERS[server](port),
            process_env(DATABASE_URL=database_url_of_this_run(), REDIS_URL=settings.REDIS_URL, **env),
        )
        started.append(process)
        process.wait_for(lambda: port_open(port), f"{server} listening on {port}")
        process.port, process.url = port, f"http://127.0.0.1:{port}"
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def asgi_server(serve_asgi):
    return serve_asgi()


# --- attached clusters (the fake Kubernetes API server of tests/kubeapi) ---


@pytest.fixture
def gpu_cluster(kubeapi):
    """The fake API server as a GPU cluster: the GPU Operator (NVIDIADriver mode) and three H100 nodes."""
    from tests.kubeapi import objects

    objects.gpu_operator(kubeapi)
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        kubeapi.create(objects.gpu_node(name, count=8))
    kubeapi.settle()
    kubeapi.clear_requests()
    return kubeapi


@pytest.fixture
def attach(owner, catalog):
    """attach(server, name) -> a Cluster of tenant 'acme' attached through the service, as a tenant would."""
    from clusters.services import attach_cluster
    from nvke.tenancy.context import TenantContext
    from tests.nvke.providers.kubernetes.access import nvke_token

    membership = owner.memberships.get()

    def run(server, name: str = "onprem") -> Cluster:
        return attach_cluster(
            context=TenantContext(membership.tenant, membership.role),
            name=name,
            endpoint=server.url,
            token=nvke_token(server),  # NVKE's service account, as rbac.manifest() grants it
            ca_bundle=server.ca_bundle,
        )

    return run


@pytest.fixture
def make_attached_pool(catalog):
    """make_attached_pool(cluster, nodes, max_nodes): an H100 pool of an attached cluster, reconciled
    once (it adopts what matches)."""
    from nodepools.services import reconcile

    def make(cluster: Cluster, nodes: int = 3, max_nodes: int | None = None, name: str = "train") -> NodePool:
        pool = NodePool.objects.create(
            tenant=cluster.tenant,
            cluster=cluster,
            name=name,
            gpu_model=GpuModel.objects.get(name="h100-sxm5-80gb"),
            gpus_per_node=8,
            node_count=nodes,
            min_nodes=0,
            max_nodes=max(nodes, max_nodes or nodes),
            driver_release=DriverRelease.objects.get(version="570.133.20"),
            status=NodePool.Status.PROVISIONING,
        )
        reconcile(pool.pk)
        pool.refresh_from_db()
        return pool

    return make
