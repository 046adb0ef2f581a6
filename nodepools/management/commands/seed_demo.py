"""A demo tenant with a small simulated fleet, for the embedded default's first run."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from catalog.models import DriverRelease, GpuModel, KubernetesVersion, Region
from catalog.seed import seed_catalog
from claims.allocator import create_claim
from clusters.models import Cluster
from clusters.services import create_cluster
from nodepools.services import create_pool
from nvke.tenancy.context import TenantContext
from nvke.tenancy.demo import DEMO_PASSWORD, DEMO_USER, OPERATOR_PASSWORD, OPERATOR_USER
from nvke.tenancy.models import Membership, Tenant

# (name, namespace, kind, fields): fractions of the L4s, MIG slices of the H100s.
DEMO_CLAIMS = [
    ("chat-7b", "inference", "fraction", {"gpu_memory_mib": 8192, "compute_percent": 40}),
    ("embeddings", "inference", "fraction", {"gpu_memory_mib": 4096, "compute_percent": 20}),
    ("rerank", "inference", "fraction", {"gpu_memory_mib": 6144, "compute_percent": 30}),
    ("notebook", "research", "mig", {"mig_profile": "1g.10gb"}),
    ("finetune", "research", "mig", {"mig_profile": "3g.40gb", "training": True}),
]


class Command(BaseCommand):
    help = (
        "Seed the catalog, a demo tenant (its owner demo / nvke-demo) with a cluster, two GPU pools and a "
        "few claims placed on them, and an operator (operator / nvke-operator)."
    )

    def handle(self, *args, **options):
        # Accounts with published passwords belong in a first run on SQLite, nowhere else.
        if not settings.EMBEDDED:
            raise CommandError(
                f"seed_demo creates the users {DEMO_USER} / {DEMO_PASSWORD} and the superuser "
                f"{OPERATOR_USER} / {OPERATOR_PASSWORD}: only for the embedded default (no DATABASE_URL, "
                "no REDIS_URL). Create users with createsuperuser instead."
            )
        seed_catalog()
        with transaction.atomic():
            user = _account(DEMO_USER, DEMO_PASSWORD, staff=False)
            _account(OPERATOR_USER, OPERATOR_PASSWORD, staff=True)
            tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
            Membership.objects.get_or_create(tenant=tenant, user=user, defaults={"role": "owner"})
        if Cluster.objects.filter(tenant=tenant).exists():
            self.stdout.write("Demo tenant already present.")
            return
        context = TenantContext(tenant, "owner")
        cluster = create_cluster(
            context=context,
            name="demo",
            kubernetes_version=KubernetesVersion.objects.get(is_default=True),
            region=Region.objects.get(name="us-east-1"),
            control_plane_nodes=1,
        )
        driver = DriverRelease.objects.get(version="580.105.08")
        create_pool(
            context=context,
            cluster=cluster,
            name="inference-l4",
            gpu_model=GpuModel.objects.get(name="l4"),
            gpus_per_node=4,
            node_count=2,
            min_nodes=1,
            max_nodes=4,
            driver_release=driver,
            sharing_mode="fractional",
        )
        create_pool(
            context=context,
            cluster=cluster,
            name="training-h100",
            gpu_model=GpuModel.objects.get(name="h100-sxm5-80gb"),
            gpus_per_node=8,
            node_count=2,
            min_nodes=0,
            max_nodes=8,
            driver_release=driver,
            sharing_mode="mig",
            mig_layout=["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        )
        for name, namespace, kind, fields in DEMO_CLAIMS:  # something placed to look at, and live load
            create_claim(
                context=context, cluster=cluster, name=name, namespace=namespace, kind=kind, **fields
            )
        self.stdout.write(self.style.SUCCESS(f"Demo tenant created: owner {DEMO_USER} / {DEMO_PASSWORD}"))


def _account(username: str, password: str, *, staff: bool):
    user, created = get_user_model().objects.get_or_create(
        username=username,
        defaults={"is_staff": staff, "is_superuser": staff, "email": f"{username}@nvke.local"},
    )
    if created:
        user.set_password(password)
        user.save()
    return user
