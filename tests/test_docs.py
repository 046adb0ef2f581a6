"""docs/architecture.md's table of apps and packages stays true to the tree: every module it names
exists in its package, and every module of a package is named in its row (or has a row of its own)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Django's plumbing and packaging, not the package's own parts.
NOT_PARTS = {"__init__.py", "apps.py", "migrations", "management", "templatetags", "templates", "static"}
MODULE = re.compile(r"`([a-z_][a-z0-9_]*)(?:\.py|/)?`")


def package_rows() -> dict[str, str]:
    text = ARCHITECTURE.read_text()
    section = text.split("## Apps and packages", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if match := re.match(r"\| `([a-z_.]+)` \| (.+) \|$", line):
            rows[match[1]] = match[2]
    return rows


def parts_of(package: str) -> set[str]:
    folder = ROOT / package.replace(".", "/")
    return {
        path.name.removesuffix(".py")
        for path in folder.iterdir()
        if path.name not in NOT_PARTS
        and (path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()))
    }


def test_the_table_covers_every_app():
    rows = package_rows()
    apps = {p.parent.name for p in ROOT.glob("*/apps.py")} | {"nvke"}
    assert apps <= set(rows)


def test_each_row_names_the_modules_of_its_package_and_no_others():
    rows = package_rows()
    for package, text in rows.items():
        parts = parts_of(package)
        children = (name.removeprefix(package + ".") for name in rows if name.startswith(package + "."))
        own_rows = {child for child in children if "." not in child}
        named = set(MODULE.findall(text))
        assert named <= parts | own_rows, f"{package}: no such module: {sorted(named - parts - own_rows)}"
        assert parts - own_rows <= named, f"{package}: not in its row: {sorted(parts - own_rows - named)}"
