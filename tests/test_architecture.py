"""The shape of the code: which package may import which, and how long a function may be.

docs/ARCHITECTURE.md says in one sentence what each package holds. The
imports must agree with it, so that the crawl master and the slaves share
only what lives below both (the protocol in ``queues/``, the store in
``sql/``, the WARC files in ``srcrawl/warc/``, the core modules of
``srcrawl/``), and nothing but the command line and the benchmarks reaches
up into the application layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PACKAGES = ("master", "slave", "queues", "indexer", "pagerank", "sql", "benchmarks", "portal")
APP_PACKAGES = ("benchmarks", "portal")
# srcrawl/ holds one folder a layer, and its folder names the layer: core/ (what every
# package may import: defaults, keys, errors, URLs), warc/ (the WARC files), settings/
# (the config object, which opens the store), app/ (the command line, the phase runner,
# the demo), testweb/ (the synthetic web) and lab/ (code for tests and benchmarks only)
SRCRAWL_LAYERS = {p.name for p in (ROOT / "srcrawl").iterdir() if (p / "__init__.py").exists()}
APP_LAYERS = {"app", "testweb"}

# What each layer may import (besides itself). "app" is the command line, the
# phase runner, the demo, the test web, the benchmarks and the portal: it may import
# anything but the lab.
ALLOWED = {
    "core": {"core"},
    "queues": {"core"},
    # the WARC files: written by the slaves, read by the store (page texts) and the index
    "warc": {"core"},
    "sql": {"core", "warc"},
    "settings": {"core", "sql", "warc"},
    "master": {"core", "settings", "queues", "sql"},
    "slave": {"core", "settings", "queues", "sql", "warc"},
    "indexer": {"core", "settings", "queues", "sql", "slave", "warc"},
    "pagerank": {"core", "settings", "queues", "sql", "slave", "warc"},
    "lab": {"core", "settings", "queues", "sql", "warc", "indexer", "app", "testweb"},
}
LAB_USERS = ("benchmarks", "tests")
"""The only folders whose code may import srcrawl/lab/."""

MAX_LINES = 60


def _source_files() -> list[Path]:
    skip = {"build", "dist", ".git", ".venv", "venv", "node_modules"}
    return sorted(
        p
        for p in ROOT.rglob("*.py")
        if not skip.intersection(p.relative_to(ROOT).parts)
        and not any(part.endswith(".egg-info") for part in p.parts)
    )


def _layer_of_file(path: Path) -> str:
    rel = path.relative_to(ROOT)
    top = rel.parts[0]
    if top == "srcrawl":
        if len(rel.parts) == 2:  # srcrawl/__init__.py: the version, below everything
            return "core"
        layer = rel.parts[1]
        return "app" if layer in APP_LAYERS else layer
    if top in PACKAGES:
        return "app" if rel.stem == "commands" or top in APP_PACKAGES else top
    return "tests"


def _layer_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "srcrawl":
        return None
    if len(parts) == 1:
        return "core"
    if parts[1] in PACKAGES:
        return "app" if parts[-1] == "commands" or parts[1] in APP_PACKAGES else parts[1]
    if parts[1] in SRCRAWL_LAYERS:
        return "app" if parts[1] in APP_LAYERS else parts[1]
    return "core"  # `from srcrawl import __version__`


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from srcrawl.app import status` imports the module srcrawl.app.status
            folder = ROOT / Path(*node.module.split("."))
            if node.module.split(".")[0] == "srcrawl" and folder.is_dir():
                found += [
                    (node.lineno, f"{node.module}.{a.name}")
                    for a in node.names
                    if (folder / f"{a.name}.py").exists() or (folder / a.name).is_dir()
                ]
    return found


def _package_files() -> list[Path]:
    return [p for p in _source_files() if _layer_of_file(p) != "tests"]


@pytest.mark.parametrize("path", _package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path: Path) -> None:
    layer = _layer_of_file(path)
    tree = ast.parse(path.read_text(), str(path))
    wrong = []
    for line, module in _imports(tree):
        target = _layer_of_module(module)
        if target is None:
            continue
        if (
            module == "srcrawl.app.cli"
            and path.relative_to(ROOT).as_posix() != "srcrawl/app/cli.py"
        ):
            wrong.append(f"line {line}: {module} (the library never imports the command line)")
        elif (
            target == "lab" and layer != "lab" and path.relative_to(ROOT).parts[0] not in LAB_USERS
        ):
            wrong.append(f"line {line}: {module} (only tests and benchmarks use the lab)")
        elif layer != "app" and target != layer and target not in ALLOWED[layer]:
            wrong.append(f"line {line}: {module} ({layer} may not import {target})")
    assert not wrong, "\n".join(wrong)


def test_the_rules_catch_an_import_against_the_direction(tmp_path: Path) -> None:
    """The check above is not vacuous: it sees lazy imports and each kind of layer."""
    tree = ast.parse("def f():\n    from srcrawl.slave.crawl import CrawlHandler\n")
    assert _imports(tree) == [(2, "srcrawl.slave.crawl")]
    assert _layer_of_module("srcrawl.slave.crawl") == "slave" not in ALLOWED["master"]
    assert _layer_of_file(ROOT / "master" / "commands.py") == "app"
    assert _layer_of_file(ROOT / "srcrawl" / "core" / "keys.py") == "core"
    assert _layer_of_module("srcrawl.app.cli") == "app" not in ALLOWED["core"]
    assert _layer_of_file(ROOT / "srcrawl" / "warc" / "read.py") == "warc"
    assert _layer_of_module("srcrawl.sql.store") == "sql" not in ALLOWED["warc"]
    assert _layer_of_module("srcrawl.settings.config") == "settings" not in ALLOWED["queues"]
    assert _layer_of_module("srcrawl.lab.corpus") == "lab" not in ALLOWED["indexer"]
    tree = ast.parse("from srcrawl.app import status\n")
    assert (1, "srcrawl.app.status") in _imports(tree)


def test_srcrawl_holds_one_folder_a_layer() -> None:
    """No module sits loose in srcrawl/ (but the package's own __init__): each is in the
    folder of its layer, which is what the rules above read."""
    loose = [p.name for p in (ROOT / "srcrawl").glob("*.py") if p.name != "__init__.py"]
    assert loose == []
    assert {"core", "warc", "settings", "app", "lab", "testweb"} <= SRCRAWL_LAYERS


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (length := node.end_lineno - node.lineno + 1) > MAX_LINES
    ]


def test_no_function_is_longer_than_sixty_lines() -> None:
    """Benchmarks and tests included; ruff's C901 (pyproject.toml) bounds complexity."""
    long = [hit for path in _source_files() for hit in _long_functions(path)]
    assert not long, "\n".join(long)
