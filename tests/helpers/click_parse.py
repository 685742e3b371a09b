"""What ``srcrawl ARGS`` would run, found by parsing alone (nothing runs)."""

from __future__ import annotations

import warnings

import click


def parse_command(args: list[str]) -> tuple[click.Command, click.Context]:
    """The click command ``srcrawl ARGS`` would run and its parsed context; raises if it
    does not exist or its arguments do not parse."""
    from srcrawl.app.cli import cli

    ctx = cli.make_context("srcrawl", list(args), resilient_parsing=False)
    command: click.Command = cli
    while isinstance(command, click.Group):
        with warnings.catch_warnings():  # protected_args: deprecated, still where click puts it
            warnings.simplefilter("ignore", DeprecationWarning)
            pending = [*ctx.protected_args, *ctx.args]
        name, command, rest = command.resolve_command(ctx, pending)
        ctx = command.make_context(name, rest, parent=ctx)
    return command, ctx
