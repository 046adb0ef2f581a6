"""The house as drawn: the import contracts of .importlinter hold (apps layered frontend → upgrades and
telemetry → nodepools and claims → clusters → the providers → catalog → the platform; only the
simulator imports its models; no cycles between the modules of any package; only the allocator takes
its lock). import-linter builds the import graph with grimp, which sees function-level imports too, so
a lazy import cannot slip past. It runs in a child process: in the test process zope.interface (loaded
with daphne) gives classes an attribute import-linter trips on."""

import configparser
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


COMPOSITION_ROOTS = {"nvke.urls", "nvke.routing", "nvke.asgi"}


def test_every_module_of_nvke_has_a_layer_or_is_a_composition_root():
    """The platform's layer names nvke's modules one by one (the providers sit above the catalog, the
    rest below it): a new module of nvke must be placed, or no contract would see what it imports."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layers = config["importlinter:contract:layers"]["layers"]
    named = {name.strip() for line in layers.splitlines() for name in line.replace("|", ":").split(":")}
    modules = {
        f"nvke.{path.stem if path.suffix == '.py' else path.name}"
        for path in (ROOT / "nvke").iterdir()
        if path.name != "__init__.py" and (path.suffix == ".py" or (path / "__init__.py").exists())
    }
    assert modules - COMPOSITION_ROOTS == modules & named, sorted(modules - COMPOSITION_ROOTS - named)
