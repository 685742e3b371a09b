"""Writes docs/reference/cli.md: every srcrawl command's ``--help``, as click prints it.

    python scripts/cli_reference.py            # rewrite the page
    python scripts/cli_reference.py --check    # exit 1 if the page differs

tests/test_cli_reference.py fails when the page drifts from the commands' ``--help``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from srcrawl.app.cli import cli

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "cli.md"
# a fixed width, so the page does not depend on the terminal it was made in
WIDTH = 100
HEAD = """# CLI reference

Every command's `--help`, generated from the commands themselves by
`python scripts/cli_reference.py` (a test fails when this page drifts from them).
What each command does, with examples, is in [Commands](../commands.md).
"""


def contexts(
    command: click.Command, name: str, parent: click.Context | None = None
) -> Iterator[click.Context]:
    """The context of ``command`` and of every command under it, depth first, by name."""
    # the command's own settings (`-h` beside `--help`), as click's make_context applies them
    settings = {"terminal_width": WIDTH, **command.context_settings}
    ctx = click.Context(command, info_name=name, parent=parent, **settings)
    yield ctx
    if isinstance(command, click.Group):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                yield from contexts(sub, sub_name, ctx)


def help_text(ctx: click.Context) -> str:
    return ctx.command.get_help(ctx)


def page() -> str:
    parts = [HEAD]
    for ctx in contexts(cli, "srcrawl"):
        parts.append(f"## `{ctx.command_path}`\n\n```text\n{help_text(ctx)}\n```\n")
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    text = page()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is out of date: run python scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
