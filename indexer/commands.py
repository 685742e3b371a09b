"""Command line of the index phase and search: `index`, `search`."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from srcrawl.app.cli_options import DURATION
from srcrawl.core.defaults import (
    DEFAULT_INDEX_BATCH_PAGES,
    DEFAULT_INDEX_FOLLOW_DELAY,
    DEFAULT_INDEX_SLAVES,
    DEFAULT_SEARCH_TOP,
)
from srcrawl.indexer.tokenizer import ENV_USER_DICT
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.indexer.master import IndexReport


def _config(ctx: click.Context) -> Config:
    """The configuration the root command loaded."""
    return ctx.find_root().obj


def _use_user_dict(path: str | None) -> None:
    """Make ``--user-dict`` what this process and the local slaves it starts read."""
    if path:
        os.environ[ENV_USER_DICT] = str(Path(path).resolve())


user_dict_option = click.option(
    "--user-dict",
    type=click.Path(dir_okay=False),
    envvar=ENV_USER_DICT,
    default=None,
    help="jieba user dictionary (word [freq] [tag] per line) [env SRCRAWL_USER_DICT]; "
    "slaves and search must use the same one.",
)


@click.command("index")
@click.option(
    "--slaves",
    type=click.IntRange(0, 64),
    default=DEFAULT_INDEX_SLAVES,
    show_default=True,
    help="Local index slaves to start (0: only the master; slaves run elsewhere).",
)
@click.option(
    "--batch",
    "batch_pages",
    type=click.IntRange(1, 10_000),
    default=DEFAULT_INDEX_BATCH_PAGES,
    show_default=True,
    help="Pages per task.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep indexing pages as they are stored or fetched again, until SIGINT/SIGTERM "
    "(then exit 0); reports how long new pages take to become searchable.",
)
@click.option(
    "--max-delay",
    type=DURATION,
    default=DEFAULT_INDEX_FOLLOW_DELAY,
    show_default=True,
    help="With --follow: the delay aimed at from a page's store write to its being "
    "searchable (90s, 1m, …); it looks for new pages every quarter of it.",
)
@click.option(
    "--rebuild",
    is_flag=True,
    help="Index every stored page again into a new index (current fields, the current "
    "--user-dict), which replaces the old one once complete; searches use the old one "
    "meanwhile. Refused while another index master runs.",
)
@user_dict_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.pass_context
def index_command(
    ctx: click.Context,
    slaves: int,
    batch_pages: int,
    follow: bool,
    max_delay: float,
    rebuild: bool,
    user_dict: str | None,
    as_json: bool,
) -> None:
    """Index new and re-fetched pages: this master schedules and merges, slaves tokenize."""
    import threading

    from srcrawl.app.runner import PhaseRun
    from srcrawl.core.errors import LeaseHeld
    from srcrawl.core.signals import stop_gently
    from srcrawl.indexer.master import IndexMaster
    from srcrawl.indexer.rebuild import IndexRebuild

    cfg = _config(ctx)
    cfg.check()
    if max_delay <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--max-delay")
    if rebuild and follow:
        raise click.UsageError("--rebuild indexes what is stored and ends: not with --follow")
    _use_user_dict(user_dict)
    stopping = threading.Event()
    master = (IndexRebuild if rebuild else IndexMaster).from_config(
        cfg, batch_pages=batch_pages, follow=max_delay if follow else None, stopping=stopping
    )
    with PhaseRun(cfg, "index", slaves) as run:
        if not slaves:
            run.line.say(f"{master.id}: waiting for index slaves (srcrawl slave start)")
        try:
            with stop_gently(stopping) if follow else contextlib.nullcontext():
                report = master.run(
                    slaves=run.local,
                    progress=lambda r: run.line.update(_progress(r)),
                    say=run.line.say,
                )
        except LeaseHeld as e:
            if not rebuild:
                raise
            raise click.ClickException(f"{e}: no rebuild while it runs; stop it first") from None
    _print_index_report(cfg, report, as_json=as_json)
    if rebuild and not as_json:
        click.echo(f"the index at {cfg.index_url or cfg.index_work_path} is rebuilt")
    elif not as_json:
        _note_built_before(cfg)
    if report.failed and not follow:
        sys.exit(1)


def _progress(r: IndexReport) -> str:
    line = (
        f"indexed {r.indexed}/{r.scheduled} scheduled  {r.pages_per_s:.1f} pages/s  "
        f"failed {r.failed}  {r.wall_s:.0f}s"
    )
    fresh = r.freshness
    if fresh.get("delay_p50_s") is not None:
        line += f"  delay p50 {fresh['delay_p50_s']:.1f}s p95 {fresh['delay_p95_s']:.1f}s"
    return line


def _print_index_report(cfg: Config, report: IndexReport, *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"job": cfg.job, **report.as_dict()}, sort_keys=True))
    else:
        click.echo(
            f"indexed {report.indexed} pages ({report.stale} changed meanwhile, "
            f"{report.failed} failed, {report.removed} gone removed) in {report.wall_s:.1f} s, "
            f"{report.pages_per_s:.1f} pages/s, {report.merges} commits into "
            f"{cfg.index_url or cfg.index_work_path}"
        )
        fresh = report.freshness
        if fresh.get("delay_p50_s") is not None:
            click.echo(
                f"{fresh['fresh_pages']} pages stored meanwhile became searchable: delay "
                f"p50 {fresh['delay_p50_s']:.2f} s, p95 {fresh['delay_p95_s']:.2f} s, "
                f"max {fresh['delay_max_s']:.2f} s"
            )
    for error in report.errors:
        click.echo(f"srcrawl: {error}", err=True)


def _note_built_before(cfg: Config) -> None:
    """Say what an index an older srcrawl built lacks, and how to get it."""
    from srcrawl.indexer.engine import IndexUnavailable, built_before, open_index

    try:
        lacking = built_before(open_index(cfg.index_work_path))
    except IndexUnavailable:
        return
    if lacking:
        click.echo(
            f"note: the index at {cfg.index_url or cfg.index_work_path} was built before "
            f"{'; '.join(lacking)}: `srcrawl index --rebuild` adds them",
            err=True,
        )


def _term_marks() -> tuple[str, str]:
    """How ``srcrawl search`` marks the query terms of a snippet: bold on a terminal
    (unless NO_COLOR is set), else « » (text piped on keeps marks it can read)."""
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        return "\x1b[1m", "\x1b[22m"  # bold on, and off again (normal intensity)
    from srcrawl.indexer.search.snippets import MARK_CLOSE, MARK_OPEN

    return MARK_OPEN, MARK_CLOSE


def _sync_replica(cfg: Config) -> None:
    """With an index in an object store: bring the replica searched up to the published
    commit (once; a ``serve`` beside it that follows it already is left to). A store that
    does not answer is said, and the commit held searched; none held, an error."""
    from srcrawl.indexer.published import IndexStoreError
    from srcrawl.indexer.replica import replica_of

    # the state recorded only in a Redis of one's own: a search starts no embedded server
    replica = replica_of(cfg, record=not cfg.embedded)
    if replica is None:
        return
    try:
        replica.sync()
    except IndexStoreError as e:
        if replica.held is None:
            raise click.ClickException(f"no index replica yet, and {e}") from None
        click.echo(f"note: searching commit {replica.held.opstamp} held here: {e}", err=True)
    finally:
        replica.stop()


@click.command("search")
@click.argument("query")
@click.option(
    "--top",
    type=click.IntRange(1, 1000),
    default=DEFAULT_SEARCH_TOP,
    show_default=True,
    help="Hits to show.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON list of {url, title, score, snippet, similar, similar_urls} (terms "
    "marked «like this» in the snippet).",
)
@user_dict_option
@click.pass_context
def search_command(
    ctx: click.Context, query: str, top: int, as_json: bool, user_dict: str | None
) -> None:
    """Search the index: pages with every word first, then with most of them; "a phrase",
    -word, site:host; PageRank a bounded prior."""
    from srcrawl.indexer.search import Searcher
    from srcrawl.indexer.tokenizer import get_tokenizer

    cfg = _config(ctx)
    _sync_replica(cfg)
    searcher = Searcher(cfg.store(), cfg.index_path, tokenizer=get_tokenizer(user_dict))
    # jieba's load is start-up, not query time; a query without Chinese never loads it
    searcher.tokenizer.warm_up(query)
    result = searcher.search(query, top=top)
    words = "some words"
    if result.mode == "and":  # (the pages with some words are counted too when listed)
        words = "every word" if result.every == result.matches else f"{result.every} every word"
    found = (
        f"{len(result.hits)} of {result.matches} "
        f"pages ({words}"
        f"{', PageRank blended' if result.ranked else ''}) in {result.elapsed_ms:.1f} ms"
    )
    notes = list(result.notes)
    if result.suggestion:
        notes.append(f"did you mean: {result.suggestion}")
    if as_json:
        click.echo(json.dumps([h.as_json() for h in result.hits], ensure_ascii=False, indent=2))
        for note in notes:
            click.echo(f"note: {note}", err=True)
        click.echo(found, err=True)
        return
    marks = _term_marks()
    for i, hit in enumerate(result.hits, 1):
        click.echo(f"{i:>2}. {hit.title.strip() or hit.url}")
        click.echo(f"    {hit.url}")
        if hit.snippet:
            click.echo(f"    {hit.snippet.marked(*marks)}")
        similar = f"  ({hit.similar} similar pages)" if hit.similar else ""
        click.echo(f"    score {hit.score:.4f}{similar}")
    for note in notes:
        click.echo(f"note: {note}")
    click.echo(found if result.hits else f"no results ({result.elapsed_ms:.1f} ms)")
