"""`srcrawl bench isolation`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from srcrawl.benchmarks.commands.common import config_of, json_option, rounds_option
from srcrawl.benchmarks.scaling import (
    check_outputs,
)
from srcrawl.core.progress import ProgressLine


@click.command("isolation")
@click.option(
    "--synthetic",
    is_flag=True,
    help="A test web (600 pages) as the good site, not Debian's python-django-doc.",
)
@click.option(
    "--kinds",
    default=",".join(("drip", "headers", "chunked", "huge", "robots")),
    show_default=True,
    help="Comma-separated kinds of slow host, each crawled beside the good site in turn.",
)
@click.option(
    "--hold",
    type=click.FloatRange(1),
    default=120.0,
    show_default=True,
    help="Seconds the slow host holds each answer open.",
)
@click.option("--slaves", type=click.IntRange(1), default=2, show_default=True)
@rounds_option(1, "Crawls alone then beside, for each kind: the figures are their medians.")
@json_option("Also write every crawl's figures as JSON.")
@click.pass_context
def bench_isolation(
    ctx: click.Context,
    synthetic: bool,
    kinds: str,
    hold: float,
    slaves: int,
    rounds: int,
    json_path: str | None,
) -> None:
    """A good site crawled alone then beside a slow host, for each kind: its times, and ratio."""
    from srcrawl.benchmarks.isolation import GOAL, as_json, render, run_isolation
    from srcrawl.testweb.slow_host import KINDS

    chosen = tuple(k.strip() for k in kinds.split(",") if k.strip())
    if not chosen or set(chosen) - set(KINDS):
        raise click.BadParameter(f"kinds are {', '.join(KINDS)}", param_hint="--kinds")
    check_outputs(json_path=json_path, plot_path=None)
    line = ProgressLine()
    try:
        runs = run_isolation(
            config_of(ctx),
            kinds=chosen,
            synthetic=synthetic,
            hold=hold,
            slaves=slaves,
            rounds=rounds,
            say=line.say,
        )
    finally:
        line.done()
    click.echo(render(runs))
    if json_path:
        Path(json_path).write_text(json.dumps(as_json(runs), indent=2) + "\n")
    if any(p.ratio > GOAL for p in runs):
        raise SystemExit(1)
