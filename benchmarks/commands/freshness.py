"""`srcrawl bench freshness`."""

from __future__ import annotations

import click

from srcrawl.app.cli_options import DURATION
from srcrawl.benchmarks.commands.common import (
    config_of,
    duration_option,
    hosts_option,
    pages_option,
    seed_option,
)
from srcrawl.core.progress import ProgressLine


@click.command("freshness")
@hosts_option(
    4, "Hosts of the changing test web (host 0, the special pages, is not crawled).", low=2
)
@pages_option(15, "Regular pages per host.")
@click.option(
    "--budget",
    default=4.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Fetches per second each crawl may make (enforced by politeness).",
)
@duration_option("4m", "How long freshness is sampled once the first crawls are over.")
@seed_option("Seed of the web and its changes.")
@click.option(
    "--policy",
    type=click.Choice(("adaptive", "nutch")),
    default="adaptive",
    show_default=True,
    help="The revisit policy measured against uniform.",
)
@click.option(
    "--sitemaps",
    "sitemap_every",
    type=DURATION,
    default="0s",
    show_default=True,
    help="The measured crawl's hosts serve sitemaps with each page's lastmod, read "
    "again this often (--sitemap-every; its requests count against the budget); "
    "0s: no sitemaps.",
)
@click.pass_context
def bench_freshness(
    ctx: click.Context,
    hosts: int,
    pages: int,
    budget: float,
    duration: float,
    seed: int,
    policy: str,
    sitemap_every: float,
) -> None:
    """Freshness of the store and bytes sent: adaptive revisit against uniform, same budget."""
    from srcrawl.benchmarks.freshness import render, run_freshness_benchmark

    cfg = config_of(ctx)
    cfg.check()
    line = ProgressLine()
    try:
        setup, runs = run_freshness_benchmark(
            cfg,
            hosts=hosts,
            pages=pages,
            budget=budget,
            duration=duration,
            seed=seed,
            say=line.update,
            policy=policy,
            sitemap_every=sitemap_every,
        )
    finally:
        line.done()
    click.echo(render(setup, runs))
