"""Least privilege both ways: NVKE's Kubernetes scenarios, run as NVKE's service account against the stand-in
that authorizes every request, use nothing the access manifest does not grant, and the manifest grants
nothing they never use."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvke.providers.kubernetes import rbac

from .rbac_usage import USAGE_ENV

ROOT = Path(__file__).resolve().parents[4]
NVKE = f"system:serviceaccount:{rbac.NAMESPACE}:{rbac.ACCOUNT}"
# attach (every scenario attaches), kube_sync at 1.34 and 1.36 (test_rbac), placement on DRA and on the
# scheduler path, drains, driver upgrades, and the both-targets DRA scenarios at 1.34 and 1.36
SCENARIOS = [
    "tests/nvke/providers/kubernetes/test_rbac.py",
    "tests/nvke/providers/kubernetes/test_workloads.py",
    "tests/nvke/providers/kubernetes/test_scheduler.py",
    "tests/nvke/providers/kubernetes/test_operations.py",
    "tests/nvke/providers/kubernetes/test_upgrades.py",
    "tests/nvke/providers/kubernetes/test_attach_admission_and_driver.py",
    "tests/nvke/providers/kubernetes/test_both_targets_strict.py",
]


def _own_database(env: dict[str, str]) -> None:
    """The inner run makes its own test database, apart from this run's."""
    url = env.get("DATABASE_URL")
    if url and url.startswith("postgres"):
        env["DATABASE_URL"] = f"{url}_rbac_usage"


@pytest.mark.integration
def test_nvke_uses_all_and_only_what_its_cluster_role_grants(tmp_path):
    usage = tmp_path / "usage.json"
    env = {**os.environ, USAGE_ENV: str(usage), "PYTHONPATH": str(ROOT)}
    _own_database(env)
    command = [sys.executable, "-m", "pytest", *SCENARIOS, "-q", "-x", "-p", "no:randomly"]
    command += ["-p", "tests.nvke.providers.kubernetes.rbac_usage", "-p", "no:cacheprovider"]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=560)
    assert run.returncode == 0, run.stdout[-4000:]

    decisions = [tuple(row) for row in json.loads(usage.read_text())]
    nvke = {
        (group, resource, verb): allowed for user, group, resource, verb, allowed in decisions if user == NVKE
    }
    assert nvke, "the scenarios ran as NVKE's service account"
    assert [key for key, allowed in nvke.items() if not allowed] == []
    granted = {(rule.group, rule.resource, verb) for rule, verb in rbac.checks(dra=True)}
    basic = {("authorization.k8s.io", "selfsubjectaccessreviews", "create")}  # every user's (bootstrap)
    assert set(nvke) - granted - basic == set(), "NVKE asked for more than its role grants"
    assert granted - set(nvke) == set(), "the role grants what no scenario uses: remove it"
