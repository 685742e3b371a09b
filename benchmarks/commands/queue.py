"""`srcrawl bench queue`."""

from __future__ import annotations

import click

from srcrawl.benchmarks.commands.common import config_of


@click.command("queue")
@click.option(
    "--messages",
    default=100_000,
    show_default=True,
    type=click.IntRange(1),
    help="Messages to push and pop.",
)
@click.option(
    "--batch",
    default=1000,
    show_default=True,
    type=click.IntRange(1),
    help="Messages per pop/ack round trip.",
)
@click.option(
    "--size", default=64, show_default=True, type=click.IntRange(1), help="Bytes per message."
)
@click.pass_context
def bench_queue(ctx: click.Context, messages: int, batch: int, size: int) -> None:
    """Push, reliably pop and ack small messages through the protocol."""
    from srcrawl.benchmarks.queue import run_queue_benchmark

    cfg = config_of(ctx)
    result = run_queue_benchmark(cfg.redis(), messages=messages, batch=batch, size=size)
    click.echo(result.render())
