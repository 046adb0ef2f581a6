from tests.telemetry.conftest import clean_redis, cluster, frac_pool, node, tenant  # noqa: F401
