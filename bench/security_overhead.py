"""What the security layer costs per request, in one process on PostgreSQL:

- API reads through a bearer token, with the rate-limit throttles (two Redis counters) on and off;
- node pool updates through the service, with the audit log's signal handlers and a GPU quota (a
  tenant row lock plus one sum) on and off.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nvke_bench_sec python bench/security_overhead.py \
        [--requests 400] [--updates 300] [--json]

REDIS_URL (the rate-limit counters) defaults to redis://127.0.0.1:6379/11; nothing there is flushed.
Tasks the services enqueue go to an in-memory broker and are not run. The database is migrated and
may be emptied."""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/11")


def per_call_ms(fn, n: int) -> float:
    fn()  # warm up
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="alternating on/off rounds; the median is kept")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Set DATABASE_URL to a PostgreSQL database this benchmark may empty.")
    from bench_db import bench_cluster, ensure_database, fresh_catalog

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.conf import settings
    from django.db.models.signals import post_delete, post_save, pre_save
    from rest_framework.settings import api_settings
    from rest_framework.test import APIClient
    from rest_framework.views import APIView

    from nvke.celery import app as celery_app

    celery_app.conf.broker_url = "memory://"  # enqueued reconciles stay here; no worker gets them
    fresh_catalog()
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.NVKE_RATE_LIMITS = {"token": "1000000/minute", "user": "1000000/minute"}

    from audit import recorder
    from catalog.models import DriverRelease, GpuModel
    from nodepools.models import NodePool
    from nodepools.services import update_pool
    from nvke.tenancy.models import ApiToken, GpuQuota, Membership, Tenant

    tenant = Tenant.objects.create(name="Bench", slug="bench")
    user = django.contrib.auth.get_user_model().objects.create_user("bench")
    Membership.objects.create(tenant=tenant, user=user, role="owner")
    _, raw = ApiToken.issue(tenant=tenant, user=user, name="bench")
    cluster = bench_cluster(tenant, control_plane_nodes=1)
    pool = NodePool.objects.create(
        tenant=tenant,
        cluster=cluster,
        name="gpu",
        gpu_model=GpuModel.objects.get(name="l4"),
        gpus_per_node=4,
        node_count=0,
        min_nodes=0,
        max_nodes=2,
        driver_release=DriverRelease.objects.get(version="580.105.08"),
        status="ready",
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    throttles = list(api_settings.DEFAULT_THROTTLE_CLASSES)

    def read():
        assert client.get("/api/v1/clusters/").status_code == 200

    def set_throttles(on: bool) -> None:
        APIView.throttle_classes = throttles if on else []

    flip = iter(range(10**9))

    def write():
        update_pool(pool, max_nodes=2 + next(flip) % 2)

    def set_audit(on: bool) -> None:
        for model in list(recorder._registry):
            uid = f"audit:{model._meta.label}"
            for signal, handler in (
                (pre_save, recorder._before_save),
                (post_save, recorder._after_save),
                (post_delete, recorder._after_delete),
            ):
                if on:
                    signal.connect(handler, sender=model, dispatch_uid=uid)
                else:
                    signal.disconnect(sender=model, dispatch_uid=uid)
        if on:
            GpuQuota.objects.get_or_create(tenant=tenant, gpu_model=pool.gpu_model, defaults={"max_gpus": 64})
        else:
            GpuQuota.objects.filter(tenant=tenant).delete()

    results: dict[str, list[float]] = {k: [] for k in ("read_on", "read_off", "write_on", "write_off")}
    for _ in range(args.rounds):
        for on in (True, False):
            set_throttles(on)
            results["read_on" if on else "read_off"].append(per_call_ms(read, args.requests))
            set_audit(on)
            results["write_on" if on else "write_off"].append(per_call_ms(write, args.updates))
    set_throttles(True)
    set_audit(True)
    median = {k: round(statistics.median(v), 2) for k, v in results.items()}
    if args.json:
        print(json.dumps(median))
        return
    print(
        f"API read (token, GET /api/v1/clusters/): {median['read_on']} ms with rate limits, "
        f"{median['read_off']} ms without"
    )
    print(f"Pool update (service): {median['write_on']} ms with audit + GPU quota, ", end="")
    print(f"{median['write_off']} ms without")


if __name__ == "__main__":
    main()
