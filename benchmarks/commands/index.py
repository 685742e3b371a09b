"""`srcrawl bench index`."""

from __future__ import annotations

import click

from srcrawl.benchmarks.commands.common import config_of, pages_option, run_scaling, seed_option
from srcrawl.benchmarks.scaling import (
    check_outputs,
    parse_slave_counts,
    scaling_options,
)


@click.command("index")
@pages_option(
    5000, "Generated pages (Chinese and English, ~2 KB of text each).", low=10, high=10_000_000
)
@seed_option("Corpus seed.")
@scaling_options(default_slaves="1,2,4", throughput="pages/s", rounds=True)
@click.pass_context
def bench_index(
    ctx: click.Context,
    pages: int,
    slaves_text: str,
    seed: int,
    rounds: int,
    json_path: str | None,
    plot_path: str | None,
) -> None:
    """Raw jieba vs the index phase with 1, 2, 4 slaves on the same generated pages."""
    from srcrawl.benchmarks.index import run_index_benchmark

    slaves = parse_slave_counts(slaves_text)
    check_outputs(json_path=json_path, plot_path=plot_path)
    cfg = config_of(ctx)
    cfg.check()
    run_scaling(
        lambda line: run_index_benchmark(
            cfg,
            pages=pages,
            slaves=slaves,
            seed=seed,
            rounds=rounds,
            say=line.say,
            progress=line.update,
        ),
        json_path=json_path,
        plot_path=plot_path,
    )
