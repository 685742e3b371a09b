"""`srcrawl bench loco`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click

from srcrawl.benchmarks.commands.common import config_of, json_option
from srcrawl.core.progress import ProgressLine


@click.command("loco")
@click.option(
    "--corpus",
    "corpora",
    multiple=True,
    default=("all",),
    show_default=True,
    help="Shipped corpora of `bench search --corpus` to leave out in turn (repeatable; "
    "`all` for every one; at least three).",
)
@click.option(
    "--slaves",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Slaves that crawl, index and rank a corpus the first time it is used.",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Crawl and index the corpora again and measure every value again (after a change "
    "to the crawl, the index or the ranking, which the kept answers do not know of).",
)
@click.option(
    "--joint",
    is_flag=True,
    help="Instead: the weights whose single choice splits the corpora (title, anchor text, "
    "words near each other, idf in the whole page, pages short of a word) chosen together, "
    "every combination of their values measured.",
)
@click.option(
    "--long",
    "long_queries",
    is_flag=True,
    help="Instead: the weights of queries of four words or more (the title's, the anchor "
    "text's, a page short of a word counting more as the query is longer) chosen together, "
    "every combination of their values measured.",
)
@json_option("Also write each signal's choices and figures as JSON.")
@click.pass_context
def bench_loco(
    ctx: click.Context,
    corpora: tuple[str, ...],
    slaves: int,
    fresh: bool,
    joint: bool,
    long_queries: bool,
    json_path: str | None,
) -> None:
    """Each ranking weight chosen on the other corpora and judged on the one left out: for
    each signal (title, anchor text, the host's repeated text, identifiers, a word as
    typed, PageRank, pages short of a word, hub pages lowered, words near each other, the
    query's meaning, a word's best field, a word's idf in the whole page), the value of a
    small grid with the best mean MRR@10 without that corpus, its MRR@10 and success@3
    there beside the default's and the signal off's (0).
    Each corpus is crawled and indexed once and each value's answers kept (in
    $SRCRAWL_HOME/bench/loco), so a run that stops goes on where it was."""
    from srcrawl.benchmarks.known_queries import builtin_query_file, read_query_file
    from srcrawl.benchmarks.loco import (
        JOINT_GRID,
        LONG_GRID,
        loco_home,
        render,
        render_joint,
        run_joint,
        run_loco,
    )

    names = _shipped(corpora)
    if joint and long_queries:
        raise click.UsageError("--joint and --long are two choices: give one")
    joint = joint or long_queries
    cfg = config_of(ctx)
    if fresh:
        shutil.rmtree(loco_home(cfg), ignore_errors=True)
    line = ProgressLine()
    files = [read_query_file(builtin_query_file(c)) for c in names]
    try:
        if joint:
            grid = LONG_GRID if long_queries else JOINT_GRID
            together = run_joint(cfg, files, grid=grid, slaves=slaves, say=line.say)
        else:
            results = run_loco(cfg, files, slaves=slaves, say=line.say)
    finally:
        line.done()
    if joint:
        out: dict = {"corpora": names, "joint": together.as_json()}
        text = render_joint(together)
    else:
        out = {"corpora": names, "signals": [r.as_json() for r in results]}
        text = render(results)
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=2))
    click.echo(text)


def _shipped(corpora: tuple[str, ...]) -> list[str]:
    """The shipped corpora named (``all``: every one); BadParameter for another name or
    fewer than three."""
    from srcrawl.benchmarks.known_queries import BUILTIN, expand_corpora

    names = expand_corpora(corpora)
    unknown = [c for c in names if c not in BUILTIN]
    if unknown:
        raise click.BadParameter(
            f"not a shipped corpus: {', '.join(unknown)} ({', '.join(BUILTIN)})",
            param_hint="--corpus",
        )
    if len(names) < 3:
        raise click.BadParameter(
            "leaving one out needs three corpora or more", param_hint="--corpus"
        )
    return names
