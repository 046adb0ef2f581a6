from django.core.management.base import BaseCommand

from catalog.seed import seed_catalog


class Command(BaseCommand):
    help = (
        "Create or refresh the GPU, driver, Kubernetes-version and region catalog from the reference facts."
    )

    def handle(self, *args, **options):
        seed_catalog()
        self.stdout.write(self.style.SUCCESS("Catalog seeded."))
