"""The import rules of ARCHITECTURE.md: each stage imports only the stages before it.

Read from the source (ast), so a lazy import inside a function counts as much as one at the top;
imports under `if TYPE_CHECKING:` are annotations only and do not count.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "src" / "fsdp_skill"

# Module prefix -> layer, longest prefix first wins.
LAYERS = {
    "fsdp_skill": "base",  # the package itself (__version__)
    "fsdp_skill.files": "base",
    "fsdp_skill.paths": "base",
    "fsdp_skill.argparsing": "base",
    "fsdp_skill.apinames": "base",
    "fsdp_skill.sources": "sources",
    "fsdp_skill.pages": "pages",
    "fsdp_skill.chunking": "chunks",
    "fsdp_skill.view": "chunks",
    "fsdp_skill.index": "index",
    "fsdp_skill.search": "search",
    "fsdp_skill.freshness": "freshness",
    "fsdp_skill.build": "driver",
    "fsdp_skill.cli": "tools",
    "fsdp_skill.scrape_cli": "tools",
    "fsdp_skill.eval": "tools",
    "fsdp_skill.mcp_server": "tools",
    "fsdp_skill.skill": "tools",
}
# Layer -> the layers it may import (itself included where listed).
ALLOWED = {
    "base": {"base"},
    "sources": {"base", "pages", "sources"},
    "pages": {"base"},
    "chunks": {"base", "pages", "chunks"},
    "index": {"base", "index"},
    "freshness": {"base", "index"},
    "search": {"base", "index", "search"},
    "driver": {"base", "sources", "pages", "chunks", "index", "freshness", "driver"},
    "tools": {
        "base",
        "sources",
        "pages",
        "chunks",
        "index",
        "search",
        "freshness",
        "driver",
        "tools",
    },
}
# The one way the query path reaches build code: a missing or stale index is rebuilt on first
# use (engine.open_fresh), and a missing build dependency is named in a one-line hint.
EXCEPTIONS = {
    ("fsdp_skill.search.engine", "fsdp_skill.freshness"),
    ("fsdp_skill.search.engine", "fsdp_skill.build"),
    ("fsdp_skill.search.engine", "fsdp_skill.skill.install"),
}
# The query path's modules: also no build-side index code at all.
QUERY_PATH_FORBIDDEN = {"fsdp_skill.index.builder"}


def layer(module: str) -> str:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def imported(tree: ast.AST, known: set[str]) -> set[str]:
    """The package modules a module imports, resolved to module names (not attributes)."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                for grand in child.orelse:
                    visit(grand)
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name.startswith("fsdp_skill"))
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith(
                "fsdp_skill"
            ):
                for a in child.names:
                    sub = f"{child.module}.{a.name}"
                    out.add(sub if sub in known else child.module)
            visit(child)

    visit(tree)
    return out


def modules(pkg: Path) -> dict[str, Path]:
    found = {}
    for f in sorted(pkg.rglob("*.py")):
        parts = ("fsdp_skill", *f.relative_to(pkg).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = f
    return found


def violations(pkg: Path) -> list[str]:
    mods = modules(pkg)
    known = set(mods)
    bad = []
    for name, path in mods.items():
        src_layer = layer(name)
        for target in sorted(imported(ast.parse(path.read_text(encoding="utf-8")), known)):
            if (name, target) in EXCEPTIONS:
                continue
            if layer(target) not in ALLOWED[src_layer]:
                bad.append(f"{name} ({src_layer}) imports {target} ({layer(target)})")
            elif src_layer == "search" and target in QUERY_PATH_FORBIDDEN:
                bad.append(f"{name} (query path) imports {target}")
    return bad


def test_every_module_has_a_layer():
    for name in modules(PKG):
        assert layer(name) in ALLOWED, name
    # A new top-level module must be placed in a layer on purpose, not fall into "base".
    top = {n for n in modules(PKG) if n.count(".") == 1}
    assert top <= set(LAYERS), f"add to LAYERS and ARCHITECTURE.md: {sorted(top - set(LAYERS))}"


def test_stages_import_only_earlier_stages():
    assert violations(PKG) == []


def test_an_upward_import_is_caught(tmp_path):
    """The checker itself: a source importing the build driver, even lazily, is reported."""
    copy = tmp_path / "fsdp_skill"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "sources" / "docstrings.py"
    target.write_text(
        target.read_text() + "\n\ndef _upward():\n    from fsdp_skill.build import ensure_index\n"
    )
    (copy / "index" / "store.py").write_text(
        (copy / "index" / "store.py").read_text() + "\nfrom fsdp_skill import chunking\n"
    )
    found = violations(copy)
    assert any(
        "fsdp_skill.sources.docstrings (sources) imports fsdp_skill.build" in v for v in found
    )
    assert any("fsdp_skill.index.store (index) imports fsdp_skill.chunking" in v for v in found)


def test_examples_import_no_package_code():
    """The scripts are copied into projects that do not have this package."""
    scripts = sorted(p for p in (REPO / "scripts").glob("*.py") if p.name != "search.py")
    assert len(scripts) >= 8
    for script in scripts:  # search.py is the skill's query entry point, not an example
        names = imported(ast.parse(script.read_text(encoding="utf-8")), set())
        assert not names, f"{script.name} imports {sorted(names)}"
