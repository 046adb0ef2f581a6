"""A pytest plugin (`-p tests.nvke.providers.kubernetes.rbac_usage`): at the end of the session, write what
every fake API server of the run decided about service accounts' requests to the JSON file that
NVKE_RBAC_USAGE names, as [user, group, resource, verb, allowed] rows."""

import json
import os
from pathlib import Path

from tests.kubeapi.server import FakeKubeApi

USAGE_ENV = "NVKE_RBAC_USAGE"


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get(USAGE_ENV)
    if path:
        Path(path).write_text(json.dumps(sorted(FakeKubeApi.every_decision)))
