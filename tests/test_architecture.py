"""The house as drawn: the import contracts of .importlinter hold (apps layered frontend → upgrades and
telemetry → nodepools → clusters → nvke; only the simulator imports its models; no cycles between the
modules of any package; only the allocator takes its lock). import-linter builds the import graph with
grimp, which sees function-level imports too, so a lazy import cannot slip past. It runs in a child
process: in the test process zope.interface (loaded with daphne) gives classes an attribute
import-linter trips on."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename=sys.argv[1], limit_to_contracts=(sys.argv[2],), no_cache=True))"
)


@pytest.mark.parametrize(
    "contract", ["layers", "simulator-models-private", "no-cycles", "allocator-internals"]
)
def test_import_contract_is_kept(contract):
    result = subprocess.run(
        [sys.executable, "-c", LINT, str(ROOT / ".importlinter"), contract],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout  # the contract exists and was checked
