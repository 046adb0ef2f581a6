"""One tenant's stalled cluster endpoint holds only the cluster worker, and only for the task time
limit, while another tenant's claim is placed by the allocator's worker meanwhile; and inside the
cluster worker it holds only its tenant's slots, while another tenant's pool task runs."""

import socket
import ssl
import threading
import time
from contextlib import contextmanager

import pytest
import redis
from django.conf import settings

from claims.allocator import create_claim
from claims.models import Claim
from clusters.models import Cluster
from nodepools import tasks as pool_tasks
from nodepools.services import reconcile
from nvke.celery import app as celery_app
from nvke.tenancy.context import TenantContext
from tests.kubeapi.tls import server_material
from tests.security.test_bulkheads import worker_queues

from .processes import BIN, Process, database_url_of_this_run, process_env, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
SOFT_S, HARD_S = 3, 6


@contextmanager
def silent_tls_listener():
    """An https endpoint that completes the TLS handshake and then never answers."""
    _, cert, key = server_material()
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []

    def serve():
        while True:
            try:
                peer, _ = listener.accept()
                held.append(tls.wrap_socket(peer, server_side=True))
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for sock in held:
            sock.close()


def worker(queues: str, pool: str, processes: int = 1, **env: str) -> Process:
    args = [str(BIN / "celery"), "-A", "nvke", "worker", "-Q", queues, "-P", pool, "-c", str(processes)]
    args += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info"]
    env = process_env(DATABASE_URL=database_url_of_this_run(), REDIS_URL=settings.REDIS_URL, **env)
    return Process(args, env)


def test_a_stalled_endpoint_holds_its_worker_for_the_soft_limit_and_no_one_elses(
    attach, gpu_cluster, make_attached_pool, make_member, make_cluster, make_pool
):
    hostile = attach(gpu_cluster)
    hostile_pool = make_attached_pool(hostile, 2)
    other = make_member("other").memberships.get().tenant
    other_cluster = make_cluster(other, "prod")
    reconcile(make_pool(other_cluster, name="a100", gpu_model="a100-sxm4-80gb", nodes=1).pk)

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    # The workers docker-compose.yml runs, one process each: the cluster worker prefork (time limits).
    workers = [worker(",".join(sorted(queues)), "prefork") for queues in worker_queues().values()]
    cluster_worker = next(w for w in workers if "provisioning" in w.proc.args[w.proc.args.index("-Q") + 1])
    celery_app.conf.task_always_eager = False
    try:
        with silent_tls_listener() as url:
            for started in workers:
                started.wait_for_line("ready.")
            Cluster.objects.filter(pk=hostile.pk).update(endpoint=url)
            sent = time.monotonic()
            # The limits travel with the message, from the sender's settings (NVKE_TASK_*): shorter here.
            pool_tasks.reconcile_pool.apply_async(
                (hostile_pool.pk,), soft_time_limit=SOFT_S, time_limit=HARD_S
            )
            cluster_worker.wait_for_line("reconcile_pool", timeout_s=30)

            create_claim(
                context=TenantContext(other, "owner"),
                cluster=other_cluster,
                name="c",
                kind="whole",
                place=False,
            )  # placed by a pass on the allocator queue
            wait_until(lambda: Claim.objects.get(name="c").status == "allocated", "other tenant's claim", 15)
            placed = time.monotonic() - sent
            assert "Soft time limit" not in cluster_worker.log, "placed while the cluster worker was held"

            cluster_worker.wait_for_line(f"Soft time limit ({SOFT_S}s) exceeded", timeout_s=30)
            held = time.monotonic() - sent
    finally:
        celery_app.conf.task_always_eager = True
        for started in workers:
            started.stop()
    print(f"other tenant's claim placed after {placed:.1f}s; cluster worker released after {held:.1f}s")
    assert placed < SOFT_S and held < SOFT_S + 10


def test_a_tenant_with_stalled_endpoints_holds_only_its_slots_of_the_cluster_worker(
    attach, gpu_cluster, make_attached_pool, make_member, make_cluster, make_pool
):
    """A cluster worker of two processes, one slot per tenant: the hostile tenant's two pool tasks
    against a stalled endpoint take one process; the second finds its tenant's slot taken and goes back
    to the queue, so another tenant's pool task runs at once instead of after the soft time limit."""
    hostile = attach(gpu_cluster)
    stalled = [make_attached_pool(hostile, 1, name=name) for name in ("train", "serve")]
    other = make_member("other").memberships.get().tenant
    other_pool = make_pool(make_cluster(other, "prod"), name="a100", gpu_model="a100-sxm4-80gb", nodes=1)

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    queues = ",".join(settings.NVKE_TENANT_CLUSTER_QUEUES)
    cluster_worker = worker(queues, "prefork", 2, NVKE_TENANT_CLUSTER_SLOTS="1", NVKE_TENANT_SLOT_RETRY_S="1")
    celery_app.conf.task_always_eager = False
    try:
        with silent_tls_listener() as url:
            cluster_worker.wait_for_line("ready.")
            Cluster.objects.filter(pk=hostile.pk).update(endpoint=url)
            sent = time.monotonic()
            held = [
                pool_tasks.reconcile_pool.apply_async((pool.pk,), soft_time_limit=SOFT_S, time_limit=HARD_S)
                for pool in stalled
            ]
            cluster_worker.wait_for(  # whichever came second found the tenant's one slot taken
                lambda: any(f"{task.id}] retry" in cluster_worker.log for task in held), "a retry", 30
            )
            theirs = pool_tasks.reconcile_pool.apply_async((other_pool.pk,))
            cluster_worker.wait_for_line(f"{theirs.id}] succeeded", timeout_s=30)
            ran = time.monotonic() - sent
            assert "Soft time limit" not in cluster_worker.log, "it waited for the hostile tenant's tasks"
    finally:
        celery_app.conf.task_always_eager = True
        cluster_worker.stop()
    print(f"other tenant's pool task done {ran:.1f}s after the hostile tenant's two stalled ones were sent")
    assert ran < SOFT_S
