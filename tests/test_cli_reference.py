"""docs/reference/cli.md is every command's --help: it fails when the page drifts."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from srcrawl.app.cli import cli

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "cli_reference.py"


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sections(text: str) -> dict[str, str]:
    """The page's help texts by command path."""
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"^## `([^`]+)`\n\n```text\n(.*?)\n```$", text, re.M | re.S)
    }


def test_the_reference_page_is_what_the_commands_print(reference) -> None:
    assert reference.PAGE.read_text(encoding="utf-8") == reference.page(), (
        "docs/reference/cli.md is out of date: run python scripts/cli_reference.py"
    )


def test_each_section_is_the_commands_own_help(reference, tmp_path: Path) -> None:
    """Each section equals what `srcrawl … --help` prints, for every command listed."""
    page = sections(reference.PAGE.read_text(encoding="utf-8"))
    paths = [ctx.command_path for ctx in reference.contexts(cli, "srcrawl")]
    assert set(page) == set(paths)  # every command, none that is gone
    assert {"srcrawl crawl", "srcrawl bench exactness", "srcrawl export pages"} <= set(paths)
    runner = CliRunner()
    for path in paths:
        args = [*path.split()[1:], "--help"]
        result = runner.invoke(
            cli,
            args,
            prog_name="srcrawl",
            env={"SRCRAWL_HOME": str(tmp_path)},
            terminal_width=reference.WIDTH,
        )
        assert result.exit_code == 0, (path, result.output)
        assert result.output.rstrip("\n") == page[path], path
