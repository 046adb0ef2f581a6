"""Fuzz the API with schemathesis against its own OpenAPI schema (/api/schema/), in process, on a
bounded, derandomized budget, with every check schemathesis has (the CLI's `--checks all`) on positive
and on negative cases: no server error, every response as the schema documents it (status, content
type, headers, body), every request the schema calls valid taken and every invalid one refused (with the
exceptions tests/security/schemathesis.toml names and says why), methods the schema does not offer
refused. Signed in as a tenant owner through a real bearer token, with a cluster, a pool and its nodes
in place so that some generated ids exist.

NVKE_FUZZ_EXAMPLES sets examples per operation (default 15; CI's budget is a few minutes)."""

import os
from pathlib import Path

import pytest
import schemathesis
from django.core import signals
from django.core.cache import cache
from django.core.wsgi import get_wsgi_application
from django.db import DatabaseError, close_old_connections, transaction
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi import checks as openapi_checks

from nodepools.services import reconcile
from nvke.tenancy.models import ApiToken

EXAMPLES = int(os.environ.get("NVKE_FUZZ_EXAMPLES", "15"))
CONFIG = Path(__file__).with_name("schemathesis.toml")


def in_savepoint(app):
    """Each request in its own savepoint of the test's transaction, rolled back after a server error:
    a failed query aborts a PostgreSQL transaction, and the rest of the run must still be tested."""

    def wrapped(environ, start_response):
        savepoint = transaction.savepoint()
        status = []

        def record(line, headers, exc_info=None):
            status.append(int(line.split()[0]))
            return start_response(line, headers, exc_info)

        body = list(app(environ, record))
        try:
            if status[0] >= 500:
                raise DatabaseError("server error")
            transaction.savepoint_commit(savepoint)
        except DatabaseError:
            transaction.savepoint_rollback(savepoint)
        return body

    return wrapped


@pytest.fixture
def api_schema(db):
    """The schema, served by the app itself. Like Django's test client, keep the test's database
    connection open across requests (a WSGI request would close it when it ends)."""
    cache.clear()  # fresh rate-limit counters
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi(
            "/api/schema/",
            in_savepoint(get_wsgi_application()),
            config=SchemathesisConfig.from_path(CONFIG),
        )
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(db, make_member, make_cluster, make_pool):
    """bearer() -> headers with a fresh token: an operation may revoke the token it was given."""
    owner = make_member("acme", "owner")
    tenant = owner.memberships.get().tenant
    reconcile(make_pool(make_cluster(tenant, "prod")).pk)

    def fresh() -> dict:
        _, raw = ApiToken.issue(tenant=tenant, user=owner, name="fuzz")
        return {"Authorization": f"Bearer {raw}"}

    return fresh


FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
ALL_CHECKS = CHECKS.get_all()  # `--checks all` (the OpenAPI ones register with openapi_checks' import)
assert openapi_checks.positive_data_acceptance in ALL_CHECKS


def fuzz_test(operation, headers: dict, mode: GenerationMode):
    """A Hypothesis test of one operation: generated requests, each response checked."""

    @FUZZ_SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case):
        case.call_and_validate(headers=headers, checks=ALL_CHECKS)

    return fuzz


def test_api_answers_every_generated_request_without_5xx_and_as_documented(api_schema, bearer):
    """One Hypothesis run per operation (schemathesis' pytest plugin does not run under pytest 9);
    every failure is collected, then reported together."""
    failures, operations = [], 0
    for result in api_schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz_test(operation, bearer(), mode)()
            except Unsatisfiable:  # a free-form body (machine routes) has no schema-invalid variant
                assert mode == GenerationMode.NEGATIVE, operation.label
            except Exception as error:  # noqa: BLE001  (collect, then report every operation's failure)
                failures.append(f"{operation.label} ({mode.value}): {error}")
    assert operations > 20 and len(ALL_CHECKS) >= 14
    assert failures == [], "\n\n".join(failures)
