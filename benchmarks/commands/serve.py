"""`srcrawl bench serve`."""

from __future__ import annotations

import click

from srcrawl.benchmarks.commands.common import (
    base_option,
    config_of,
    pages_option,
    rounds_option,
    seed_option,
)


@click.command("serve")
@pages_option(
    50_000,
    "Generated and indexed pages (built once, then reused, as by bench search).",
    low=10,
    high=10_000_000,
)
@click.option(
    "--clients",
    default="1,10,50",
    show_default=True,
    help="Comma-separated numbers of concurrent clients.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(0.5),
    default=5.0,
    show_default=True,
    help="Seconds of load per (language, clients) cell (wrk takes whole seconds: a "
    "fraction is rounded up).",
)
@rounds_option(1)
@click.option(
    "--spawns",
    type=click.IntRange(1),
    default=5,
    show_default=True,
    help="`srcrawl search` processes spawned per language and round.",
)
@click.option(
    "--threads",
    type=click.IntRange(0, 64),
    default=None,
    help="The portal's search threads (in each worker; 0: searches in its event loop) "
    "[default: srcrawl serve's for the benchmark's SQLite store, 0].",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="The portal's worker processes [default: srcrawl serve's, one a core].",
)
@click.option(
    "--client",
    type=click.Choice(["wrk", "python"]),
    default=None,
    help="The load client: wrk (C, little CPU) or this process (asyncio) "
    "[default: wrk when installed].",
)
@click.option(
    "--endpoint",
    type=click.Choice(["search", "suggest"]),
    default="search",
    show_default=True,
    help="What is asked: /api/search of each query, or /api/suggest of each keystroke "
    "of them (the search box's completions; no spawned searches).",
)
@base_option(
    "Another source tree (e.g. a git worktree) whose srcrawl serve is measured beside.", dest="base"
)
@seed_option("Corpus and query seed.")
@click.pass_context
def bench_serve(
    ctx: click.Context,
    pages: int,
    clients: str,
    seconds: float,
    rounds: int,
    spawns: int,
    threads: int | None,
    workers: int | None,
    client: str | None,
    endpoint: str,
    base: str | None,
    seed: int,
) -> None:
    """Portal latency p50/p95 and requests/s under load, beside spawning `srcrawl search`."""
    from srcrawl.benchmarks.serve import run_serve_benchmark

    try:
        counts = [int(part) for part in clients.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"--clients: expected counts like 1,10,50, not {clients!r}")
    result = run_serve_benchmark(
        config_of(ctx),
        pages=pages,
        clients=counts,
        seconds=seconds,
        rounds=rounds,
        spawns=spawns,
        threads=threads,
        workers=workers,
        client=client,
        base=base,
        endpoint=endpoint,
        seed=seed,
        say=lambda s: click.echo(s, err=True),
    )
    click.echo(result.render())
