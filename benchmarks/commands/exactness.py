"""`srcrawl bench exactness`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from srcrawl.benchmarks.commands.common import json_option, partitions_option
from srcrawl.benchmarks.scaling import (
    check_outputs,
)
from srcrawl.core.progress import ProgressLine


@click.command("exactness")
@click.option(
    "--runs",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="Crawls in a row, each of a new test web with late robots.txt hosts.",
)
@click.option(
    "--first",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Number of the first run (its web's seed, --depth and sitemaps).",
)
@partitions_option("Frontier partitions of each crawl.")
@click.option(
    "--web",
    type=click.Choice(["late", "shortcuts"]),
    default="late",
    show_default=True,
    help="late: seeds beside five late seeds; shortcuts: a long host and twelve late hosts "
    "(robots.txt 500 two or three times) holding shortcuts into it.",
)
@click.option(
    "--load",
    default=0,
    show_default=True,
    type=click.IntRange(0, 64),
    help="Busy processes beside the crawls (each keeps a core busy).",
)
@json_option()
def bench_exactness(
    runs: int, first: int, partitions: int, web: str, load: int, json_path: str | None
) -> None:
    """Crawls beside late hosts against a BFS of the test web: every URL, every depth.
    Exits 1 unless every run is exact (a URL given up, even with its row, is not)."""
    from srcrawl.benchmarks.exactness import as_json, render, run_exactness_benchmark

    check_outputs(json_path=json_path, plot_path=None)
    line = ProgressLine()
    result = run_exactness_benchmark(
        runs, say=line.update, first=first, partitions=partitions, web=web, load=load
    )
    line.done()
    click.echo(render(result))
    if json_path:
        Path(json_path).write_text(json.dumps(as_json(result), indent=2) + "\n")
    if not all(r.exact for r in result):
        raise SystemExit(1)
