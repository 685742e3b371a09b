"""`srcrawl bench master`."""

from __future__ import annotations

import click

from srcrawl.benchmarks.commands.common import config_of, hosts_option, rounds_option
from srcrawl.core.progress import ProgressLine


def _counts(text: str, option: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise click.BadParameter(
            f"give whole numbers ≥ 1 separated by commas, not {text!r}", param_hint=option
        )
    return out


@click.command("master")
@click.option(
    "--urls",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(1),
    help="Links in the stream.",
)
@hosts_option(20)
@click.option(
    "--partitions",
    default=None,
    metavar="P,P,…",
    help="Instead: master processes over a crawl of this many partitions each, every "
    "URL new (with --masters; --hosts defaults to 1000 then).",
)
@click.option(
    "--masters",
    default="1,2",
    show_default=True,
    metavar="M,M,…",
    help="Master processes sharing the partitions (with --partitions).",
)
@rounds_option(1)
@click.pass_context
def bench_master(
    ctx: click.Context,
    urls: int,
    hosts: int,
    partitions: str | None,
    masters: str,
    rounds: int,
) -> None:
    """URLs/s through the master: canonicalize + scope + seen test, then with Redis commits;
    or, with --partitions, master processes sharing a partitioned crawl."""
    if partitions is None:
        from srcrawl.benchmarks.master import run_master_benchmark

        click.echo(run_master_benchmark(config_of(ctx), urls=urls, hosts=hosts).render())
        return
    from srcrawl.benchmarks.master_partitions import render, run_partition_benchmark

    line = ProgressLine()
    runs = run_partition_benchmark(
        config_of(ctx),
        _counts(partitions, "--partitions"),
        _counts(masters, "--masters"),
        urls=min(urls, 2_000_000),
        hosts=hosts if hosts != 20 else 1000,
        rounds=rounds,
        say=line.update,
    )
    line.done()
    click.echo(render(runs))
