"""`srcrawl bench outage`."""

from __future__ import annotations

import click

from srcrawl.core.progress import ProgressLine


@click.command("outage")
@click.option(
    "--phase",
    "phases",
    type=click.Choice(["pagerank", "index"]),
    multiple=True,
    help="The command to run (repeat for both; default: both).",
)
@click.option(
    "--runs",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="Runs of each phase, each with its embedded Redis SIGKILLed mid-run.",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Seed of the runs' webs, kill points and outages.",
)
@click.option(
    "--down-max",
    default=6.0,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Seconds the killed server may be kept from restarting (drawn per run).",
)
def bench_outage(phases: tuple[str, ...], runs: int, seed: int, down_max: float) -> None:
    """pagerank and index with the embedded Redis killed mid-run: exit 0 and exact, or exit 1."""
    from srcrawl.benchmarks.outage import OutageRun, render, run_outage_benchmark

    done: list = []
    line = ProgressLine()

    def said(r: OutageRun) -> None:  # each run's exit code as soon as it is known
        line.done()
        click.echo(
            f"{r.phase} run {r.run}: exit {r.exit_code}, {'ok' if r.ok else 'FAILED'} "
            f"(killed {r.killed}, restarted {r.restarted}, down {r.down:.1f} s, {r.detail})"
        )
        if r.stderr_tail:
            click.echo(r.stderr_tail)

    for phase in phases or ("pagerank", "index"):
        try:
            done += run_outage_benchmark(
                phase, runs, say=line.update, on_run=said, seed=seed, down_max=down_max
            )
        finally:
            line.done()
    click.echo(render(done))
    if not all(r.ok for r in done):
        raise SystemExit(1)
