"""The house as drawn: the import contracts of .importlinter hold (apps layered frontend → upgrades and
telemetry → nodepools and claims → clusters → the providers → tenancy and the API layer → the catalog →
the platform's ground floor; only the simulator imports its models; no cycles between the modules of any
package; only the allocator takes its lock). import-linter builds the import graph with grimp, which
sees function-level imports too, so a lazy import cannot slip past. It runs in a child process: in the
test process zope.interface (loaded with daphne) gives classes an attribute import-linter trips on."""

import ast
import configparser
import dataclasses
import functools
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


def test_every_module_of_nvke_and_the_catalog_has_a_layer_or_is_a_composition_root():
    """The layers name nvke's and the catalog's modules one by one (the platform and the catalog each
    span several layers): a new module must be placed, or no contract would see what it imports."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layers = config["importlinter:contract:layers"]["layers"]
    named = {name.strip() for line in layers.splitlines() for name in line.replace("|", ":").split(":")}
    modules = {
        f"{package}.{path.stem if path.suffix == '.py' else path.name}"
        for package in ("nvke", "catalog")
        for path in (ROOT / package).iterdir()
        if path.name not in ("__init__.py", "migrations")
        and (path.suffix == ".py" or (path / "__init__.py").exists())
    }
    assert modules - COMPOSITION_ROOTS == modules & named, sorted(modules - COMPOSITION_ROOTS - named)


# --- Writers: who may write which rows, read off the code's syntax tree ----------------------------------
# A write is a queryset method that changes rows, called on a chain rooted at the model's name
# (`Node.objects.filter(...).update(...)`), or an instance's `.save(update_fields=[...])` naming fields.
# Writes through related managers or plain `.save()` are not seen: the rules catch the common idiom, and
# each failure names the rule a newcomer broke.

PRODUCT = ["nvke", "catalog", "clusters", "nodepools", "claims", "upgrades", "telemetry", "audit", "frontend"]
WRITE_METHODS = {
    "create",
    "update",
    "bulk_create",
    "bulk_update",
    "delete",
    "get_or_create",
    "update_or_create",
}


@dataclasses.dataclass(frozen=True)
class Write:
    path: str  # relative to the repository root
    function: str  # the enclosing function ("" at module level)
    model: str
    method: str
    fields: frozenset[str]  # the keyword arguments of an update, the update_fields of a save


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _writes_in(path: Path) -> list[Write]:
    tree = ast.parse(path.read_text())
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, receiver = node.func.attr, node.func.value
            keywords = frozenset(k.arg for k in node.keywords if k.arg)
            if method in WRITE_METHODS and (model := _root_name(receiver)):
                found.append(Write(str(path.relative_to(ROOT)), function, model, method, keywords))
            elif method == "save" and isinstance(receiver, ast.Name):
                fields = next((k.value for k in node.keywords if k.arg == "update_fields"), None)
                named = {e.value for e in getattr(fields, "elts", []) if isinstance(e, ast.Constant)}
                found.append(
                    Write(str(path.relative_to(ROOT)), function, receiver.id, "save", frozenset(named))
                )
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    return found


@functools.cache
def product_writes() -> tuple[Write, ...]:
    paths = (p for package in PRODUCT for p in sorted((ROOT / package).rglob("*.py")))
    return tuple(w for p in paths if "migrations" not in p.parts for w in _writes_in(p))


def test_only_nodepools_nodes_writes_nodes_and_gpus():
    """Node and GPU state has one writer (nodepools/nodes.py), which tells the allocator of each change
    in the same transaction; anyone else calls it."""
    strays = [w for w in product_writes() if w.model in ("Node", "Gpu") and w.path != "nodepools/nodes.py"]
    assert not strays, strays


PLACEMENT_MODELS = ("Allocation", "GpuShare", "AllocationEvent", "UsageInterval")
PLACEMENT_FIELDS = {"status", "pending_reason", "allocated_at"}


def test_only_the_allocator_writes_placements():
    """Allocations, GPU shares, the allocation log, usage intervals and a claim's placement status are
    the allocator's (claims/allocator/): it holds the cluster's allocation lock and keeps every
    process's inventory true through the log."""
    strays = [
        w
        for w in product_writes()
        if (w.model in PLACEMENT_MODELS or (w.model == "Claim" and w.fields & PLACEMENT_FIELDS))
        and not w.path.startswith("claims/allocator/")
    ]
    assert not strays, strays


POOL_VERSION_FIELDS = {"driver_release", "kubernetes_version", "node_image"}


def test_only_the_pool_services_write_a_pools_versions():
    """A pool's driver, Kubernetes version and node image change through nodepools/services.py (create,
    update, an upgrade run's completion), where the rules that keep them compatible live."""
    strays = [
        w
        for w in product_writes()
        if w.model in ("NodePool", "pool")
        and w.fields & POOL_VERSION_FIELDS
        and w.path != "nodepools/services.py"
    ]
    assert not strays, strays


# Queryset updates skip the model's signals, so they leave no audit entry. Each one on an audited model
# is listed here with why that is right; a new one fails until it is listed (or written with save()).
UNAUDITED_UPDATES = {
    ("nvke/tenancy/authentication.py", "record_use", "ApiToken"): "last_used_at only, an ignored field",
    ("nodepools/autoscaler/service.py", "_call_provider", "NodePool"): "the autoscaler's scale-down progress "
    "(ignored fields); its decisions are audited",
    ("nodepools/nodes.py", "record_utilization", "NodePool"): "telemetry's reading (ignored fields)",
    ("nodepools/services.py", "complete_upgrade", "NodePool"): "the upgrade run's entry records it",
    ("claims/allocator/rows.py", "_write_with_orm", "Claim"): "placement status (ignored fields)",
    ("claims/allocator/service.py", "nodes_removed", "Claim"): "placement status (ignored fields)",
    ("claims/allocator/preemption.py", "_preempt", "Claim"): "a preemption: record() writes one entry "
    "per victim",
    ("claims/allocator/preemption.py", "_tell", "Claim"): "a preemption's notice: record() writes one "
    "entry per victim",
    ("claims/allocator/service.py", "resize_claim", "Claim"): "the rescaler's resize: a telemetry event "
    "records it, as every rescaling step",
    ("claims/workloads.py", "record", "Claim"): "the workload's state seen on the cluster, a reading",
    ("upgrades/auto_upgrade.py", "_say", "Cluster"): "a condition (ignored field)",
    ("telemetry/rescale.py", "rescale", "ClaimScaling"): "the rescaler's state (ignored fields)",
}


def test_updates_that_skip_the_audit_log_are_listed_with_their_reason():
    from audit.recorder import audited_models

    audited = {model.__name__ for model in audited_models()}
    updates = {
        (w.path, w.function, w.model) for w in product_writes() if w.method == "update" and w.model in audited
    }
    listed = set(UNAUDITED_UPDATES)
    assert updates == listed, f"not listed: {sorted(updates - listed)}; gone: {sorted(listed - updates)}"
