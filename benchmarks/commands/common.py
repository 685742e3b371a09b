"""What the benchmark commands share: the config, the scaling runs, the options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from srcrawl.app.cli_options import DURATION
from srcrawl.benchmarks.scaling import (
    ScalingResult,
)
from srcrawl.core.progress import ProgressLine
from srcrawl.settings.config import Config


def config_of(ctx: click.Context) -> Config:
    return ctx.find_root().obj


def run_scaling(
    run: Callable[[ProgressLine], ScalingResult], *, json_path: str | None, plot_path: str | None
) -> None:
    """Run a scaling benchmark with the progress line, save its JSON/plot, print its table."""
    line = ProgressLine()
    try:
        result = run(line)
    finally:
        line.done()
    result.save(json_path=json_path, plot_path=plot_path)
    click.echo(result.render())


# The options several benchmarks take, each defined once: a benchmark gives its own
# default and help where they differ.
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def pages_option(
    default: int | None, help: str, *, low: int = 1, high: int | None = None
) -> Decorator:
    """``--pages N``: pages per host of a test web, or pages of a generated index."""
    return click.option(
        "--pages",
        default=default,
        show_default=default is not None,
        type=click.IntRange(low, high),
        help=help,
    )


def json_option(help: str = "Also write every run as JSON.") -> Decorator:
    """``--json FILE``: the figures also written as JSON (the parameter ``json_path``)."""
    return click.option(
        "--json", "json_path", type=click.Path(dir_okay=False), default=None, help=help
    )


def rounds_option(default: int, help: str | None = None) -> Decorator:
    """``--rounds R``: how many times each measurement runs."""
    return click.option(
        "--rounds", default=default, show_default=True, type=click.IntRange(1), help=help
    )


def seed_option(help: str) -> Decorator:
    """``--seed S``: the seed of what the benchmark generates."""
    return click.option("--seed", default=1, show_default=True, help=help)


def hosts_option(default: int, help: str | None = None, *, low: int = 1) -> Decorator:
    """``--hosts H``: hosts of a test web."""
    return click.option(
        "--hosts", default=default, show_default=True, type=click.IntRange(low), help=help
    )


def base_option(help: str, dest: str = "base_root") -> Decorator:
    """``--base DIR``: another srcrawl checkout measured beside this one."""
    return click.option(
        "--base", dest, type=click.Path(file_okay=False, exists=True), default=None, help=help
    )


def partitions_option(help: str) -> Decorator:
    """``--partitions P``: frontier partitions of each crawl."""
    return click.option(
        "--partitions", default=1, show_default=True, type=click.IntRange(1, 64), help=help
    )


def duration_option(default: str, help: str) -> Decorator:
    """``--duration D``: how long the benchmark runs (90s, 4m, 2h)."""
    return click.option("--duration", default=default, show_default=True, type=DURATION, help=help)
