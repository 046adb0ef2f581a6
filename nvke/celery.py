"""The Celery application. Queues: `provisioning` (cluster and pool lifecycles), `allocator`,
`upgrades`, `telemetry`. Without REDIS_URL tasks run eagerly in the web process (embedded default)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")

app = Celery("nvke")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
