"""The README stays a door, not a manual, and the documentation site builds cleanly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_is_short_and_its_table_cells_are_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    cells = [
        c.strip() for line in lines if line.startswith("|") for c in line.strip("|").split("|")
    ]
    assert cells and max(map(len, cells)) <= 200


def test_the_readmes_links_reach_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", readme)]
    local = [t for t in targets if t and "://" not in t]
    assert local
    assert [t for t in local if not (ROOT / t).exists()] == []


@pytest.mark.slow
def test_the_documentation_site_builds_with_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link, a page left out of the nav or a bad
    anchor fails it."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "reference" / "cli" / "index.html").exists()
