"""`srcrawl bench pagerank`."""

from __future__ import annotations

import click

from srcrawl.benchmarks.commands.common import config_of, run_scaling, seed_option
from srcrawl.benchmarks.scaling import (
    check_outputs,
    parse_slave_counts,
    scaling_options,
)
from srcrawl.core.defaults import DEFAULT_PAGERANK_ITERATIONS


@click.command("pagerank")
@click.option("--nodes", type=click.IntRange(min=2), default=1_000_000, show_default=True)
@click.option("--edges", type=click.IntRange(min=0), default=10_000_000, show_default=True)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=DEFAULT_PAGERANK_ITERATIONS,
    show_default=True,
)
@seed_option("Seed of the graph generator.")
@scaling_options(default_slaves="1,2,4", throughput="iterations/s")
@click.pass_context
def bench_pagerank(
    ctx: click.Context,
    nodes: int,
    edges: int,
    slaves_text: str,
    iterations: int,
    seed: int,
    json_path: str | None,
    plot_path: str | None,
) -> None:
    """Seconds per iteration per slave count on a synthetic power-law web, beside scipy."""
    from srcrawl.benchmarks.pagerank import run_pagerank_benchmark

    counts = parse_slave_counts(slaves_text)
    check_outputs(json_path=json_path, plot_path=plot_path)
    cfg = config_of(ctx)
    cfg.check()
    run_scaling(
        lambda line: run_pagerank_benchmark(
            cfg,
            nodes=nodes,
            edges=edges,
            slave_counts=counts,
            iterations=iterations,
            seed=seed,
            echo=line.say,
            progress=line.update,
        ),
        json_path=json_path,
        plot_path=plot_path,
    )
