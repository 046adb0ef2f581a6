"""schemathesis' own runner, as an outside probe runs it: `schemathesis run --checks all` against a real
daphne serving the app over HTTP, with its examples, coverage (boundary values, wrong types, missing and
repeated parameters, undocumented methods) and fuzzing phases, derandomized by a fixed seed. Zero
failures; the few operations whose schema-valid requests may be refused for reasons no schema states
are named, with why, in tests/security/schemathesis.toml."""

import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

from nodepools.services import reconcile
from nvke.tenancy.models import ApiToken
from tests.integration.processes import (
    BIN,
    Process,
    database_url_of_this_run,
    free_port,
    port_open,
    process_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
CONFIG = Path(__file__).with_name("schemathesis.toml")
UNLIMITED = "1000000/minute"


def test_schemathesis_run_with_every_check_finds_nothing(make_member, make_cluster, make_pool, tmp_path):
    owner = make_member("acme", "owner")
    tenant = owner.memberships.get().tenant
    reconcile(make_pool(make_cluster(tenant, "prod")).pk)
    _, raw = ApiToken.issue(tenant=tenant, user=owner, name="fuzz")
    port = free_port()
    server = Process(
        [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "nvke.asgi:application"],
        process_env(
            DATABASE_URL=database_url_of_this_run(),
            REDIS_URL=settings.REDIS_URL,
            NVKE_LOG_LEVEL="WARNING",  # the same data dir, so the same key decrypts the cluster's token
            # Thousands of requests from one token and address: the limits are tested elsewhere.
            NVKE_RATE_LIMIT_TOKEN=UNLIMITED,
            NVKE_RATE_LIMIT_USER=UNLIMITED,
            NVKE_RATE_LIMIT_AUTH_FAILURES=UNLIMITED,
            NVKE_RATE_LIMIT_ANONYMOUS=UNLIMITED,
        ),
    )
    try:
        server.wait_for(lambda: port_open(port), f"daphne listening on {port}")
        result = subprocess.run(
            [
                str(BIN / "schemathesis"),
                "--config-file",
                str(CONFIG),
                "run",
                f"http://127.0.0.1:{port}/api/schema/",
                "--checks",
                "all",
                "--phases",
                "examples,coverage,fuzzing",
                "--max-examples",
                "10",
                "--seed",
                "1",
                "--header",
                f"Authorization: Bearer {raw}",
                "--no-color",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=540,
        )
    finally:
        server.stop()
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[-12000:] + "\n\nserver:\n" + server.log[-6000:]
    selected, tested = re.search(r"Selected: (\d+)/\d+\s+Tested: (\d+)", report).groups()
    assert int(selected) == int(tested) > 80, report[-3000:]  # every operation was reached
