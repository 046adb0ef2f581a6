"""Settings for the test suite: real PostgreSQL and Redis on this machine (override with the same
variables as production). Tasks run eagerly unless a test starts a real worker (tests/integration)."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/nvke")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
# A development setup: generated and derived keys are fine (inherited by the processes tests start).
os.environ.setdefault("NVKE_DEV", "1")

from .settings import *  # noqa: E402,F403

CELERY_TASK_ALWAYS_EAGER = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
# Rate limits far above what any test sends; tests/security sets low ones where it tests them.
NVKE_RATE_LIMITS = {"token": "100000/minute", "user": "100000/minute"}
NVKE_RATE_LIMIT_AUTH_FAILURES = NVKE_RATE_LIMIT_ANONYMOUS = "100000/minute"
# The fake Kubernetes API servers of tests/kubeapi listen on 127.0.0.1: an operator's allowance, as a
# local demo would set it (tests/security/test_outbound.py proves the default refuses them).
NVKE_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
