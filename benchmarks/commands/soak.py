"""`srcrawl bench soak`."""

from __future__ import annotations

from pathlib import Path

import click

from srcrawl.app.cli_options import DURATION
from srcrawl.benchmarks.commands.common import (
    config_of,
    duration_option,
    hosts_option,
    json_option,
    pages_option,
)
from srcrawl.core.progress import ProgressLine


@click.command("soak")
@duration_option("30m", "How long the engine runs (30m, 2h).")
@click.option(
    "--every", default="30s", show_default=True, type=DURATION, help="Time between two samples."
)
@hosts_option(
    6, "Hosts of the changing test web (host 0, the special pages, is not crawled).", low=2
)
@pages_option(40, "Regular pages per host.")
@json_option("Write every sample and the growth figures to this file.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    help="Draw the samples into this PNG (matplotlib).",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    default=None,
    help="Run in this directory and keep it (logs, store, WARC files).",
)
@click.pass_context
def bench_soak(
    ctx: click.Context,
    duration: float,
    every: float,
    hosts: int,
    pages: int,
    json_path: str | None,
    plot_path: str | None,
    keep: str | None,
) -> None:
    """The always-on engine under search load: does memory, open files or disk per page grow?"""
    from srcrawl.benchmarks.soak import SoakSetup, render, run_soak, save

    cfg = config_of(ctx)
    cfg.check()
    if every > duration / 4:
        raise click.BadParameter(
            "take at least 4 samples: --every at most --duration / 4", param_hint="--every"
        )
    setup = SoakSetup(duration=duration, every=every, hosts=hosts, pages=pages)
    line = ProgressLine()
    try:
        run = run_soak(cfg, setup, line.update, keep=Path(keep) if keep else None)
    finally:
        line.done()
    save(run, json_path, plot_path)
    click.echo(render(run))
