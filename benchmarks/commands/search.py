"""`srcrawl bench search`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

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
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.benchmarks.startup import Code


def _check_corpus_names(names: list[str]) -> None:
    """Every name, checked before the first corpus costs minutes."""
    from srcrawl.benchmarks.known_queries import ALL, BUILTIN

    for corpus in names:
        if corpus not in BUILTIN and not Path(corpus).is_dir():
            raise click.BadParameter(
                f"{corpus!r} is neither {ALL}, a shipped corpus ({', '.join(BUILTIN)}), "
                "nor a directory",
                param_hint="--corpus",
            )


def _bench_corpora(
    cfg: Config,
    corpora: tuple[str, ...],
    query_file: str | None,
    slaves: int,
    json_path: str | None,
    rounds: int = 0,
    base: Code | None = None,
    instructions: bool = False,
) -> None:
    """`bench search --corpus`: each corpus's table and its search CPU over ``rounds``
    passes (beside Tantivy alone's, and ``base``'s; with ``instructions``, their
    instructions a search too), then with several corpora their figures together (and
    all of them as JSON)."""
    from srcrawl.benchmarks.known_queries import (
        BUILTIN,
        builtin_query_file,
        expand_corpora,
        read_query_file,
    )
    from srcrawl.benchmarks.real_corpora import Overall, run_corpus

    names = expand_corpora(corpora)
    _check_corpus_names(names)
    line = ProgressLine()
    runs = []
    results = []
    for corpus in names:
        tree = None if corpus in BUILTIN else Path(corpus)
        qpath = (
            builtin_query_file(corpus)
            if tree is None
            else (Path(query_file) if query_file else tree / "queries.tsv")
        )
        try:
            result = run_corpus(
                cfg,
                read_query_file(qpath),
                tree=tree,
                slaves=slaves,
                say=line.say,
                progress=line.update,
                rounds=rounds,
                base=base,
                instructions=instructions,
            )
        finally:
            line.done()
        click.echo(result.render())
        results.append(result)
        runs.append(result.as_json())
        if json_path:  # after each corpus: a later one failing keeps the earlier figures
            Path(json_path).write_text(json.dumps({"corpora": runs}, indent=2, ensure_ascii=False))
    if len(results) > 1:
        overall = Overall(results)
        click.echo(overall.render())
        if json_path:
            out = {"corpora": runs, "overall": overall.as_json()}
            Path(json_path).write_text(json.dumps(out, indent=2, ensure_ascii=False))


@click.command("search")
@pages_option(
    50_000,
    "Generated and indexed pages (built once, then reused); 0: no latency corpus.",
    low=0,
    high=10_000_000,
)
@click.option("--queries", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option(
    "--slaves",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Slaves that build the index when it is not there yet (with --corpus: that crawl, "
    "index and rank it).",
)
@seed_option("Corpus and query seed.")
@click.option(
    "--ranking/--no-ranking",
    default=True,
    show_default=True,
    help="Also score known-item queries on the known-item test web (MRR, success@k).",
)
@base_option(
    "Root of another srcrawl checkout whose ranking to score beside this one "
    "(e.g. a `git worktree add` of an older commit), on an index it builds itself "
    "(with --corpus: its crawl, index and rank of the corpus, and its search CPU)."
)
@click.option(
    "--known-hosts",
    default=2,
    show_default=True,
    type=click.IntRange(1, 16),
    help="Hosts of the known-item test web.",
)
@click.option(
    "--known-pages",
    default=60,
    show_default=True,
    type=click.IntRange(10, 5000),
    help="Regular pages per host of the known-item test web.",
)
@rounds_option(
    5,
    "Timed passes over the known-item queries per code, codes alternating (with --corpus: "
    "each code's search CPU and Tantivy alone's, each pass a process of its own).",
)
@click.option(
    "--corpus",
    "corpora",
    multiple=True,
    help="Instead: crawl, index and rank a real documentation corpus (a shipped one: "
    "django-en, flask-en, sphinx-en, scrapy-en, pytest-en, gimp-en, apache-en, gnucash-en, "
    "debian-handbook-zh, debian-installer-zh, securing-debian-zh, libreoffice-zh; `all` for "
    "every one; or a directory of HTML "
    "with --query-file) and score its known-item queries, srcrawl beside plain BM25 "
    "(repeatable; several: their figures together too).",
)
@click.option(
    "--query-file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Known-item queries of a --corpus DIR (default: DIR/queries.tsv).",
)
@click.option(
    "--instructions",
    is_flag=True,
    help="With --corpus: also count a search's instructions by callgrind, one pass of each "
    "code and of Tantivy alone (steadier than CPU time on a shared machine; needs valgrind).",
)
@json_option("Also write the ranking figures as JSON.")
@click.pass_context
def bench_search(
    ctx: click.Context,
    pages: int,
    queries: int,
    slaves: int,
    seed: int,
    ranking: bool,
    base_root: str | None,
    known_hosts: int,
    known_pages: int,
    rounds: int,
    corpora: tuple[str, ...],
    query_file: str | None,
    instructions: bool,
    json_path: str | None,
) -> None:
    """Search latency p50/p95 over known-item queries, BM25 alone and blended with PageRank;
    then MRR and success@1/3/10 of known-item queries on the test web (with `--base`, the
    same for another checkout, side by side). With `--corpus`, only the real corpora."""
    from srcrawl.benchmarks.index import run_search_benchmark
    from srcrawl.benchmarks.ranking import run_ranking_benchmark
    from srcrawl.benchmarks.startup import code_at, this_code

    check_outputs(json_path=json_path, plot_path=None)
    cfg = config_of(ctx)
    say = lambda s: click.echo(s, err=True)  # noqa: E731
    if instructions:
        from srcrawl.benchmarks.search_instructions import valgrind_missing

        why = valgrind_missing() if corpora else "it counts the searches of --corpus"
        if why:
            raise click.BadParameter(why, param_hint="--instructions")
    if corpora:
        base = code_at("base", base_root) if base_root else None
        _bench_corpora(cfg, corpora, query_file, slaves, json_path, rounds, base, instructions)
        return
    if pages >= 10:
        result = run_search_benchmark(
            cfg, pages=pages, queries=queries, slaves=slaves, seed=seed, say=say
        )
        click.echo(result.render())
    if ranking:
        codes = [this_code()] + ([code_at("base", base_root)] if base_root else [])
        scored = run_ranking_benchmark(
            cfg,
            codes=codes,
            hosts=known_hosts,
            pages=known_pages,
            seed=seed,
            rounds=rounds,
            say=say,
        )
        if json_path:
            Path(json_path).write_text(json.dumps(scored.as_json(), indent=2))
        click.echo(scored.render())
