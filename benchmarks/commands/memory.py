"""`srcrawl bench memory`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from srcrawl.benchmarks.commands.common import hosts_option, json_option
from srcrawl.benchmarks.scaling import (
    check_outputs,
)
from srcrawl.core.progress import ProgressLine


@click.command("memory")
@click.option(
    "--urls",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(1000),
    help="Distinct URLs run through the crawl master.",
)
@hosts_option(10_000)
@click.option(
    "--depth-record",
    is_flag=True,
    help="Instead: bytes per URL of the crawl's depth record, packed and as a hash field a URL.",
)
@json_option("Also write the figures as JSON.")
def bench_memory(urls: int, hosts: int, depth_record: bool, json_path: str | None) -> None:
    """Bytes per queued URL in Redis and per seen URL in the Bloom filter (docs/SCALING.md)."""
    from srcrawl.benchmarks.memory import run_depth_record_benchmark, run_memory_benchmark

    check_outputs(json_path=json_path, plot_path=None)
    line = ProgressLine()
    figures = (
        run_depth_record_benchmark(urls, say=line.update)
        if depth_record
        else run_memory_benchmark(urls, hosts, say=line.update)
    )
    line.done()
    click.echo(figures.render())
    if json_path:
        Path(json_path).write_text(json.dumps(figures.as_json(), indent=2) + "\n")
