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

# srcrawl/ modules every package may import: defaults, keys, errors, URLs. The
# config object is one layer up: it opens the store, so it may import sql/.
CORE = {
    "__init__",
    "credentials",
    "defaults",
    "embedded",
    "errors",
    "keys",
    "outage",
    "progress",
    "redis_connect",
    "signals",
    "telemetry",
    "urls",
    "useragent",
}
PACKAGES = ("master", "slave", "queues", "indexer", "pagerank", "sql", "benchmarks", "portal")
APP_PACKAGES = ("benchmarks", "portal")

# What each layer may import (besides itself). "app" is the command line, the
# phase runner, the demo, the test web, the benchmarks and the portal: it may import anything.
ALLOWED = {
    "core": {"core"},
    "queues": {"core"},
    # the WARC files: written by the slaves, read by the store (page texts) and the index
    "warc": {"core"},
    "sql": {"core", "warc"},
    "config": {"core", "sql", "warc"},
    "master": {"core", "config", "queues", "sql"},
    "slave": {"core", "config", "queues", "sql", "warc"},
    "indexer": {"core", "config", "queues", "sql", "slave", "warc"},
    "pagerank": {"core", "config", "queues", "sql", "slave", "warc"},
}
LOW_SUBPACKAGES = ("warc",)
"""Packages under srcrawl/ that are a layer of their own (srcrawl/warc/: srcrawl.warc)."""

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
        if len(rel.parts) > 2 and rel.parts[1] in LOW_SUBPACKAGES:
            return rel.parts[1]
        if len(rel.parts) == 2 and rel.stem in CORE | {"config"}:
            return "config" if rel.stem == "config" else "core"
        return "app"
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
    if parts[1] == "config":
        return "config"
    if parts[1] in LOW_SUBPACKAGES:
        return parts[1]
    return "core" if parts[1] in CORE else "app"


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from srcrawl import cli` imports the module srcrawl.cli
            if node.module == "srcrawl":
                found += [
                    (node.lineno, f"srcrawl.{a.name}")
                    for a in node.names
                    if (ROOT / "srcrawl" / f"{a.name}.py").exists()
                    or (ROOT / "srcrawl" / a.name).is_dir()
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
        if module == "srcrawl.cli" and path.relative_to(ROOT).as_posix() != "srcrawl/cli.py":
            wrong.append(f"line {line}: {module} (the library never imports the command line)")
        elif layer != "app" and target != layer and target not in ALLOWED[layer]:
            wrong.append(f"line {line}: {module} ({layer} may not import {target})")
    assert not wrong, "\n".join(wrong)


def test_the_rules_catch_an_import_against_the_direction(tmp_path: Path) -> None:
    """The check above is not vacuous: it sees lazy imports and each kind of layer."""
    tree = ast.parse("def f():\n    from srcrawl.slave.crawl import CrawlHandler\n")
    assert _imports(tree) == [(2, "srcrawl.slave.crawl")]
    assert _layer_of_module("srcrawl.slave.crawl") == "slave" not in ALLOWED["master"]
    assert _layer_of_file(ROOT / "master" / "commands.py") == "app"
    assert _layer_of_file(ROOT / "srcrawl" / "keys.py") == "core"
    assert _layer_of_module("srcrawl.cli") == "app" not in ALLOWED["core"]
    assert _layer_of_file(ROOT / "srcrawl" / "warc" / "read.py") == "warc"
    assert _layer_of_module("srcrawl.sql.store") == "sql" not in ALLOWED["warc"]


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
