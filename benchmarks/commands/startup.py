"""`srcrawl bench startup`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from srcrawl.benchmarks.commands.common import (
    base_option,
    config_of,
    json_option,
    pages_option,
    rounds_option,
    seed_option,
)
from srcrawl.benchmarks.scaling import (
    check_outputs,
)
from srcrawl.core.progress import ProgressLine


@click.command("startup")
@rounds_option(20, "Runs of each command per code.")
@base_option(
    "Root of another srcrawl checkout to run beside this one (e.g. a "
    "`git worktree add` of an older commit)."
)
@pages_option(200, "Generated pages in the index searched.", low=10, high=100_000)
@seed_option("Corpus seed.")
@click.option("--query-en", default=None, help="English query [default: two common corpus words].")
@click.option("--query-zh", default=None, help="Chinese query [default: two common corpus words].")
@json_option("Also write the figures and every wall time as JSON.")
@click.pass_context
def bench_startup(
    ctx: click.Context,
    rounds: int,
    base_root: str | None,
    pages: int,
    seed: int,
    query_en: str | None,
    query_zh: str | None,
    json_path: str | None,
) -> None:
    """Wall time of `srcrawl search` (English, Chinese) and `--version` as new processes."""
    from srcrawl.benchmarks.startup import (
        code_at,
        default_queries,
        run_startup_benchmark,
        this_code,
    )

    check_outputs(json_path=json_path, plot_path=None)
    codes = [this_code()] + ([code_at("base", base_root)] if base_root else [])
    english, chinese = default_queries(seed)
    line = ProgressLine()
    try:
        result = run_startup_benchmark(
            config_of(ctx),
            codes=codes,
            rounds=rounds,
            pages=pages,
            seed=seed,
            queries=(query_en or english, query_zh or chinese),
            say=line.update,
        )
    finally:
        line.done()
    if json_path:
        Path(json_path).write_text(json.dumps(result.as_json(), indent=2, ensure_ascii=False))
    click.echo(result.render())
