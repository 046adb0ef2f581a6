"""The house as drawn: the import-linter contracts of `.importlinter` (apps layered frontend → upgrades
and telemetry → nodepools → clusters → nvke) hold."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contracts_hold():
    # In its own process: the linter builds its graph from source, untouched by the test run's imports.
    linted = subprocess.run(
        [sys.executable, "-c", "import sys, importlinter.cli as c; sys.exit(c.lint_imports(no_cache=True))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
