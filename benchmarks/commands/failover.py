"""`srcrawl bench failover`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from srcrawl.benchmarks.commands.common import (
    json_option,
    pages_option,
    partitions_option,
    rounds_option,
)
from srcrawl.benchmarks.scaling import (
    check_outputs,
)
from srcrawl.core.progress import ProgressLine


@click.command("failover")
@rounds_option(5, "Pairs of crawls (undisturbed, primary killed), each on a new cluster.")
@pages_option(40, "Pages per host of the 4-host test web.", low=5, high=2000)
@click.option(
    "--after",
    "after_pages",
    default=20,
    show_default=True,
    type=click.IntRange(1),
    help="Stored pages before the primary is killed.",
)
@partitions_option("Partitions of the crawl (the primary of partition 0 is killed).")
@json_option()
def bench_failover(
    rounds: int, pages: int, after_pages: int, partitions: int, json_path: str | None
) -> None:
    """A crawl on a real Redis Cluster whose primary is SIGKILLed: pages lost, refetched, time."""
    from srcrawl.benchmarks.failover import as_json, render, run_failover_benchmark

    check_outputs(json_path=json_path, plot_path=None)
    line = ProgressLine()
    runs = run_failover_benchmark(
        rounds, pages, after_pages, say=line.update, partitions=partitions
    )
    line.done()
    click.echo(render(runs))
    if json_path:
        Path(json_path).write_text(json.dumps(as_json(runs), indent=2) + "\n")
