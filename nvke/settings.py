"""Settings, all from the environment.

Embedded default (no DATABASE_URL, no REDIS_URL): SQLite under NVKE_DATA_DIR, Celery tasks run in
process, in-memory channel layer. Production shape: set DATABASE_URL and REDIS_URL (docker-compose.yml),
NVKE_SECRET_KEY, NVKE_ALLOWED_HOSTS and NVKE_SECURE=1. docs/operations.md lists every variable.
"""

import ipaddress
import os
import secrets
import socket
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(int(default))).lower() in ("1", "true", "yes", "on")


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# The embedded default runs on SQLite with tasks in process; DATABASE_URL or REDIS_URL make the
# production shape, which refuses to start without its secrets (below) and is never seeded with the
# demo user. NVKE_DEV=1 marks a development setup on local services (the test suite is one), which
# may fall back on generated and derived keys like the embedded default.
EMBEDDED = not os.environ.get("DATABASE_URL") and not os.environ.get("REDIS_URL")
PRODUCTION = not EMBEDDED and not env_bool("NVKE_DEV")
REQUIRED_SECRETS = {
    "NVKE_SECRET_KEY": "Django's secret key (sessions, CSRF, signatures): 50+ random characters",
    "NVKE_ENCRYPTION_KEY": "the Fernet key for secrets at rest: python -c 'from cryptography.fernet import"
    " Fernet; print(Fernet.generate_key().decode())'",
}
if PRODUCTION and (missing := [name for name in REQUIRED_SECRETS if not os.environ.get(name)]):
    raise ImproperlyConfigured(
        "The production shape (DATABASE_URL or REDIS_URL set) does not start without "
        + "; ".join(f"{name}, {REQUIRED_SECRETS[name]}" for name in missing)
        + ". (NVKE_DEV=1 allows development keys on local services.)"
    )

DATA_DIR = Path(os.environ.get("NVKE_DATA_DIR", BASE_DIR / "var"))
STATIC_ROOT = DATA_DIR / "static"  # collectstatic's target; whitenoise also serves from the apps
STATIC_ROOT.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """NVKE_SECRET_KEY in production; the embedded default keeps a generated key in its data dir."""
    if key := os.environ.get("NVKE_SECRET_KEY"):
        return key
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("NVKE_DEBUG")
ALLOWED_HOSTS = env_list("NVKE_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("NVKE_CSRF_TRUSTED_ORIGINS", "")

# NVKE_SECURE=1 when served over HTTPS (behind a TLS-terminating proxy): secure cookies, HSTS.
SECURE = env_bool("NVKE_SECURE")
SESSION_COOKIE_SECURE = SECURE
CSRF_COOKIE_SECURE = SECURE
SECURE_SSL_REDIRECT = SECURE and env_bool("NVKE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = 31536000 if SECURE else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE
SECURE_HSTS_PRELOAD = SECURE
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if SECURE else None
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's assets, served by whitenoise
    "channels",
    "catalog",
    "nvke.tenancy",
    "nvke.providers.simulator",
    "nvke.providers.clusterapi",
    "clusters",
    "nodepools",
    "claims",
    "telemetry",
    "upgrades",
    "frontend",
    "audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "audit.context.AuditContextMiddleware",
    "nvke.api.parsers.RejectNulInQueryMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "nvke.ratelimit.UnavailableMiddleware",
]

ROOT_URLCONF = "nvke.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "frontend.context.tenant_context",
            ],
        },
    },
]
ASGI_APPLICATION = "nvke.asgi.application"
WSGI_APPLICATION = None

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{DATA_DIR / 'nvke.sqlite3'}"), conn_max_age=0
    )
}
# PostgreSQL: each process keeps a pool of open connections (psycopg_pool), so a request or task borrows
# one instead of opening a new connection (a new server process) each time. 0 turns the pool off.
DB_POOL_MAX_SIZE = int(os.environ.get("NVKE_DB_POOL_MAX_SIZE", "10"))
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DB_POOL_MAX_SIZE > 0:
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": 30,  # seconds a request waits for a free connection before it fails
    }
# PostgreSQL: a statement a connection runs again and again is parsed and planned once (psycopg's
# prepared statements, after 5 runs; they need server-side parameter binding): parsing and planning were
# half of the database's CPU for a claim (bench/README.md). NVKE_DB_PREPARED_STATEMENTS=0 turns it off,
# for a PgBouncer in transaction mode that cannot keep prepared statements.
DB_PREPARED_STATEMENTS = env_bool("NVKE_DB_PREPARED_STATEMENTS", True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DB_PREPARED_STATEMENTS:
    DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Serve assets straight from the apps when collectstatic has not run (embedded default, tests).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

REDIS_URL = os.environ.get("REDIS_URL", "")

# Celery: JSON only; without Redis, tasks run in the calling process (embedded default).
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    "clusters.tasks.*": {"queue": "provisioning"},
    "claims.tasks.place_pending_claims": {"queue": "allocator"},
    "claims.tasks.place_all_pending_claims": {"queue": "allocator"},
    "claims.tasks.prune_allocation_log": {"queue": "allocator"},
    "nodepools.tasks.*": {"queue": "provisioning"},
    "telemetry.tasks.*": {"queue": "telemetry"},
    "upgrades.tasks.*": {"queue": "upgrades"},
}
# The pool autoscaler (nodepools/autoscaler) steps through every cluster with an autoscaling pool this
# often (beat; a timer thread in the embedded default), besides when a claim is left pending.
NVKE_AUTOSCALER_INTERVAL_S = float(os.environ.get("NVKE_AUTOSCALER_INTERVAL_S", "15"))
# Preemption (claims/allocator/preemption.py): a victim keeps its GPUs this long after it is told.
NVKE_PREEMPTION_GRACE_S = float(os.environ.get("NVKE_PREEMPTION_GRACE_S", "0"))
CELERY_BEAT_SCHEDULE = {
    "reconcile-fleet": {"task": "nodepools.tasks.reconcile_all_pools", "schedule": 60.0},
    "place-pending-claims": {"task": "claims.tasks.place_all_pending_claims", "schedule": 30.0},
    "prune-allocation-log": {"task": "claims.tasks.prune_allocation_log", "schedule": 300.0},
    "autoscale-pools": {"task": "nodepools.tasks.autoscale_all", "schedule": NVKE_AUTOSCALER_INTERVAL_S},
    "telemetry-rollup": {"task": "telemetry.tasks.rollup", "schedule": 10.0},
    "telemetry-rescale": {"task": "telemetry.tasks.rescale", "schedule": 5.0},
    "telemetry-heartbeats": {"task": "telemetry.tasks.check_heartbeats", "schedule": 15.0},
    "prune-audit-log": {"task": "audit.tasks.prune_audit_log", "schedule": 3600.0},
    "resync-upgrades": {
        "task": "upgrades.tasks.resync_runs",
        "schedule": float(os.environ.get("NVKE_UPGRADE_RESYNC_S", "30")),
    },
}
# The pool autoscaler (nodepools/autoscaler): a node it takes out and that has not drained in this long
# goes back into service.
NVKE_AUTOSCALER_DRAIN_TIMEOUT_S = float(os.environ.get("NVKE_AUTOSCALER_DRAIN_TIMEOUT_S", "600"))
# Driver upgrades: seconds between a run's ticks (each tick re-queues the next with this countdown).
NVKE_UPGRADE_TICK_S = float(os.environ.get("NVKE_UPGRADE_TICK_S", "2"))
# A message a worker took and did not acknowledge (acks_late: a running task, or an ETA'd one it holds,
# such as an upgrade's next tick) goes back to its queue once it is this old, so a SIGKILLed worker's
# messages are taken up by another within about this long, beat or no beat (Kombu's default is an
# hour). It must exceed the longest countdown (the tick) and the longest task, or those run twice (they
# are idempotent, so that costs work, not correctness). Abandoned messages are looked for every quarter
# of it (Kombu's default is every 100 s).
NVKE_BROKER_VISIBILITY_TIMEOUT_S = float(
    os.environ.get("NVKE_BROKER_VISIBILITY_TIMEOUT_S", max(120.0, 10 * NVKE_UPGRADE_TICK_S))
)
if NVKE_BROKER_VISIBILITY_TIMEOUT_S <= 2 * NVKE_UPGRADE_TICK_S:
    raise ImproperlyConfigured(
        "NVKE_BROKER_VISIBILITY_TIMEOUT_S must be more than twice NVKE_UPGRADE_TICK_S, or every tick is"
        " delivered again while its worker still waits for it."
    )
# Every task's time limits (prefork workers): at the soft one the task gets SoftTimeLimitExceeded (its
# work is idempotent: the next tick or reconcile carries on), at the hard one its process is killed and
# replaced. A call to a tenant's cluster ends within 30 s (nvke/providers/kubernetes/client.py); these
# bound a task's many calls, and a body that trickles into a model the client builds itself. The hard
# limit stays under the visibility timeout, or a task still running would be delivered again.
CELERY_TASK_SOFT_TIME_LIMIT = int(os.environ.get("NVKE_TASK_SOFT_TIME_LIMIT_S", "60"))
CELERY_TASK_TIME_LIMIT = int(os.environ.get("NVKE_TASK_TIME_LIMIT_S", "90"))
if not CELERY_TASK_SOFT_TIME_LIMIT < CELERY_TASK_TIME_LIMIT < NVKE_BROKER_VISIBILITY_TIMEOUT_S:
    raise ImproperlyConfigured(
        "NVKE_TASK_SOFT_TIME_LIMIT_S < NVKE_TASK_TIME_LIMIT_S < NVKE_BROKER_VISIBILITY_TIMEOUT_S must hold."
    )
# The queues whose tasks call tenants' clusters (provisioning, pools, upgrades): served by their own
# workers (docker-compose's cluster-worker), so an endpoint that stalls holds only those, never the
# allocator's, telemetry's or the default queue's.
NVKE_TENANT_CLUSTER_QUEUES = ("provisioning", "upgrades")
# Of those workers' processes, how many one tenant's tasks may hold at once (nvke/tenant_slots.py; 0: no
# limit), and after how many seconds a task that found its tenant's slots taken is tried again.
NVKE_TENANT_CLUSTER_SLOTS = int(os.environ.get("NVKE_TENANT_CLUSTER_SLOTS", "2"))
NVKE_TENANT_SLOT_RETRY_S = float(os.environ.get("NVKE_TENANT_SLOT_RETRY_S", "2"))
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": NVKE_BROKER_VISIBILITY_TIMEOUT_S,
    "unacked_restore_interval": max(1, int(NVKE_BROKER_VISIBILITY_TIMEOUT_S // 4)),
    "unacked_restore_throttle": 1,  # scan on every sweep: the interval alone says how often
}
# Audit log: entries older than this many days are pruned hourly by beat; 0 keeps them forever.
NVKE_AUDIT_RETENTION_DAYS = int(os.environ.get("NVKE_AUDIT_RETENTION_DAYS", "365"))

# Asyncio Redis clients (channel layer, telemetry hub) run without a socket timeout: with one, redis-py
# wraps every write in asyncio.wait_for, which on Python 3.11 swallows a cancellation arriving as the
# write completes (fixed in 3.12). A closing websocket cancels its channel-layer receive; with the
# cancellation lost, that receive polled BZPOPMIN forever and the consumer never ended. Reads still end:
# BZPOPMIN returns every 5 s, and TCP keepalive finds a vanished Redis within about a minute.
ASYNC_REDIS_OPTIONS = {
    "socket_timeout": None,
    "socket_connect_timeout": 5,
    "socket_keepalive": True,
    # Linux names; elsewhere the system's keepalive defaults apply.
    "socket_keepalive_options": {
        getattr(socket, name): value
        for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
        if hasattr(socket, name)
    },
}
CHANNEL_LAYERS = {
    "default": (
        # redis-py's pools stop at 100 connections by default: hundreds of sockets closing at once
        # (group_discard) raised "Too many connections".
        {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "max_connections": 1000, **ASYNC_REDIS_OPTIONS}]},
        }
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "nvke.tenancy.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["nvke.api.permissions.TenantRolePermission"],
    # JSON bodies only: form and multipart bodies (nothing of NVKE's sends them) are 415, one input
    # language less, and the schema documents exactly what is taken.
    "DEFAULT_PARSER_CLASSES": ["nvke.api.parsers.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "nvke.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "nvke.api.filters.FilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "nvke.api.errors.exception_handler",
    "DEFAULT_METADATA_CLASS": "nvke.api.metadata.Metadata",
    # Per token and per user, in one Redis call.
    "DEFAULT_THROTTLE_CLASSES": ["nvke.api.throttling.RequestRateThrottle"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "NVKE API",
    "DESCRIPTION": "Managed Kubernetes for GPU fleets: clusters, GPU node pools and the GPU catalog.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Tags by resource (the path's first part after /api/v1/: clusters, node-pools, claims, fleet…), so
    # /api/docs/ groups its operations instead of listing them all under "v1".
    "SCHEMA_PATH_PREFIX": r"/api/v[0-9]+",
    # No internet at run time: /api/docs/ loads Swagger UI from the app's static files.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two `scope` fields with their own choices: API tokens' and maintenance exclusions'; claims' `kind`
    # (a claim's and a claim group's template) beside other `kind` fields.
    "ENUM_NAME_OVERRIDES": {
        "ScopeEnum": "nvke.tenancy.models.ApiToken.Scope",
        "MaintenanceScopeEnum": "upgrades.windows.SCOPES",
        "ClaimKindEnum": "claims.models.Claim.Kind",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "nvke.api.schema.document_errors",  # the {code, message, details} error responses
    ],
}

# API rate limits ("<n>/<second|minute|hour|day>"); over them: 429 with Retry-After. Counted atomically
# in Redis (nvke/ratelimit.py), else in this process's memory.
NVKE_RATE_LIMITS = {
    "token": os.environ.get("NVKE_RATE_LIMIT_TOKEN", "600/minute"),
    "user": os.environ.get("NVKE_RATE_LIMIT_USER", "1200/minute"),
}
# Per client address: failed token authentications (API and websockets; past it every token request
# from there is 429 until the window, which starts at the first failure, ends) and websocket handshakes
# without a credential.
NVKE_RATE_LIMIT_AUTH_FAILURES = os.environ.get("NVKE_RATE_LIMIT_AUTH_FAILURES", "100/minute")
NVKE_RATE_LIMIT_ANONYMOUS = os.environ.get("NVKE_RATE_LIMIT_ANONYMOUS", "60/minute")
# Django's cache (nothing of NVKE's counts in it now): Redis when configured, else process memory.
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "nvke",
        }
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
# Password guessing (nvke/tenancy/login_throttle.py): failed sign-ins per address, for one username and
# for all, before sign-ins from that address are refused for NVKE_LOGIN_LOCKOUT_S seconds.
AUTHENTICATION_BACKENDS = ["nvke.tenancy.login_throttle.ThrottledModelBackend"]
NVKE_LOGIN_FAILURES_PER_USER = int(os.environ.get("NVKE_LOGIN_FAILURES_PER_USER", "10"))
NVKE_LOGIN_FAILURES_PER_ADDRESS = int(os.environ.get("NVKE_LOGIN_FAILURES_PER_ADDRESS", "50"))
NVKE_LOGIN_LOCKOUT_S = int(os.environ.get("NVKE_LOGIN_LOCKOUT_S", "900"))
# Invitations to a tenant (nvke/tenancy/services.py) lapse after this many days; a tenant has at most
# this many open at once (each is a row and a line in every list of them).
NVKE_INVITATION_TTL_DAYS = int(os.environ.get("NVKE_INVITATION_TTL_DAYS", "7"))
NVKE_MAX_PENDING_INVITATIONS = int(os.environ.get("NVKE_MAX_PENDING_INVITATIONS", "100"))
# The node label naming a node's rack: claim groups (gangs) keep their members in one rack when they fit.
NVKE_RACK_LABEL = os.environ.get("NVKE_RACK_LABEL", "topology.kubernetes.io/rack")
# Default quotas (claims/quotas.py): GPUs of each model a tenant's pools may reach when neither the
# tenant nor the platform (a GPU quota row without a tenant, in the admin) has a limit for that model;
# empty: unlimited. And the most nodes one pool may ask for, whatever the quotas (a 400 beyond it).
_default_gpu_quota = os.environ.get("NVKE_DEFAULT_GPU_QUOTA", "64").strip()
NVKE_DEFAULT_GPU_QUOTA = int(_default_gpu_quota) if _default_gpu_quota else None
NVKE_MAX_POOL_NODES = int(os.environ.get("NVKE_MAX_POOL_NODES", "100"))
# Client addresses (nvke/addresses.py: audit log, sign-in lockouts, per-address rate limits): how many
# proxies in front append to X-Forwarded-For (one TLS proxy by default with NVKE_SECURE=1), or, taking
# precedence, their addresses or networks. "true"/"false" read as 1/0 hops, as the setting once was.
_trust_proxy = os.environ.get("NVKE_TRUST_PROXY", str(int(SECURE))).strip().lower()
NVKE_TRUST_PROXY = int(_trust_proxy) if _trust_proxy.isdecimal() else int(env_bool("NVKE_TRUST_PROXY"))
NVKE_TRUSTED_PROXIES = env_list("NVKE_TRUSTED_PROXIES", "")
for _network in NVKE_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as error:
        raise ImproperlyConfigured(f"NVKE_TRUSTED_PROXIES: {error}") from None
# Tenant clusters (nvke/outbound.py, nvke/providers/kubernetes/client.py): the networks NVKE may call
# besides public addresses (empty: loopback, private and link-local are refused; a lab or a local demo
# lists e.g. 10.0.0.0/8 or 127.0.0.1/32), how many clusters a tenant may attach (empty: no cap), and
# the time limits of every Celery task (soft: the task is told; hard: its process is killed).
NVKE_OUTBOUND_ALLOWED_NETWORKS = env_list("NVKE_OUTBOUND_ALLOWED_NETWORKS", "")
for _network in NVKE_OUTBOUND_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as error:
        raise ImproperlyConfigured(f"NVKE_OUTBOUND_ALLOWED_NETWORKS: {error}") from None
_attached_cap = os.environ.get("NVKE_MAX_ATTACHED_CLUSTERS", "20").strip()
NVKE_MAX_ATTACHED_CLUSTERS = int(_attached_cap) if _attached_cap else None
# Clusters one kube_sync process watches (one HTTP/2 connection each); the rest of its shard are polled.
NVKE_KUBE_SYNC_WATCHED_CLUSTERS = int(os.environ.get("NVKE_KUBE_SYNC_WATCHED_CLUSTERS", "1000"))

# Telemetry (telemetry/): frame interval of the live streams, rescaling and health rules. A busy view's
# newest rows wait up to one interval for their frame, so the interval is the floor of sample-to-screen
# latency: 0.1 s keeps its p99 under 250 ms (bench/README.md, live fan-out).
TELEMETRY_FRAME_INTERVAL_S = float(os.environ.get("NVKE_TELEMETRY_FRAME_INTERVAL_S", "0.1"))
TELEMETRY_STALLED_SOCKET_S = float(os.environ.get("NVKE_TELEMETRY_STALLED_SOCKET_S", "30"))
TELEMETRY_PRESSURE_PERCENT = int(os.environ.get("NVKE_TELEMETRY_PRESSURE_PERCENT", "90"))  # of the share
TELEMETRY_PRESSURE_S = int(os.environ.get("NVKE_TELEMETRY_PRESSURE_S", "30"))
TELEMETRY_IDLE_PERCENT = int(os.environ.get("NVKE_TELEMETRY_IDLE_PERCENT", "10"))
TELEMETRY_IDLE_S = int(os.environ.get("NVKE_TELEMETRY_IDLE_S", "600"))
TELEMETRY_NODE_NOT_READY_S = int(os.environ.get("NVKE_TELEMETRY_NODE_NOT_READY_S", "60"))
TELEMETRY_NODE_REPAIR_S = int(os.environ.get("NVKE_TELEMETRY_NODE_REPAIR_S", "300"))  # simulator replaces
FATAL_XIDS_DEFAULT = "48,62,63,64,74,79,92,94,95,119,120"  # DBE, GSP, row remap, NVLink, off the bus, ECC
TELEMETRY_FATAL_XIDS = [int(x) for x in env_list("NVKE_TELEMETRY_FATAL_XIDS", FATAL_XIDS_DEFAULT)]
# Samples waiting for a web process's ingestion writer before it answers 503 with Retry-After.
TELEMETRY_INGEST_MAX_PENDING = int(os.environ.get("NVKE_TELEMETRY_INGEST_MAX_PENDING", "50000"))
METRICS_TOKEN = os.environ.get("NVKE_METRICS_TOKEN", "")  # /metrics answers only with this bearer token

# Which provider provisions the clusters NVKE creates: "simulator" (the default) or "clusterapi" (Cluster
# API, nvke/providers/clusterapi/). Clusters a tenant attaches always use the Kubernetes provider.
NVKE_PROVIDER = os.environ.get("NVKE_PROVIDER", "simulator")
# clusterapi: the management cluster's kubeconfig file, when its admin setting (ManagementCluster) has none.
NVKE_CAPI_KUBECONFIG = os.environ.get("NVKE_CAPI_KUBECONFIG", "")
# The image attached clusters run nvke-agent from (telemetry/agent_manifest.py): NVKE's own image.
NVKE_AGENT_IMAGE = os.environ.get("NVKE_AGENT_IMAGE", "nvke:latest")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("NVKE_LOG_LEVEL", "INFO")},
}
