"""Command line of PageRank: ``pagerank``, ``export ranks``.

Heavy imports (numpy, the master) happen inside the commands, so the CLI
starts fast for every other command.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

import click

from srcrawl.app.cli_options import DURATION
from srcrawl.core.defaults import (
    DEFAULT_LEASE_WAITING_RENEW,
    DEFAULT_PAGERANK_DAMPING,
    DEFAULT_PAGERANK_ITERATIONS,
    DEFAULT_PAGERANK_POLL,
    DEFAULT_PAGERANK_SLAVES,
    DEFAULT_PAGERANK_TOL,
)
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.pagerank.job import RankOptions, SlaveProcesses
    from srcrawl.pagerank.master import RankParams, RankResult


def _config(ctx: click.Context) -> Config:
    """The configuration the root command loaded."""
    return ctx.find_root().obj


@click.command("pagerank")
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=DEFAULT_PAGERANK_ITERATIONS,
    show_default=True,
    help="Most iterations to run.",
)
@click.option(
    "--damping",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=DEFAULT_PAGERANK_DAMPING,
    show_default=True,
    help="Probability of following a link rather than jumping to a random page.",
)
@click.option(
    "--tol",
    type=click.FloatRange(min=0.0),
    default=DEFAULT_PAGERANK_TOL,
    show_default=True,
    help="Stop once an iteration changes the ranks by less than this (L1); 0: never.",
)
@click.option(
    "--slaves",
    type=click.IntRange(min=0),
    default=DEFAULT_PAGERANK_SLAVES,
    show_default=True,
    help="Local slave processes to start; 0: rely on slaves started elsewhere.",
)
@click.option("--skip-internal", is_flag=True, help="Ignore links between two pages of one host.")
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    help="Graph shards, i.e. map tasks per iteration [default: one per ~1M links].",
)
@click.option(
    "--every",
    type=DURATION,
    default=None,
    help="Rank again this long after each run ends (30m, 6h, …) until SIGINT/SIGTERM "
    "(then exit 0); searches use the previous ranks until new ones replace them at once. "
    "The first run starts as soon as the store has pages and links.",
)
@click.option(
    "--poll",
    type=DURATION,
    default=DEFAULT_PAGERANK_POLL,
    show_default=True,
    help="With --every: how often a store without pages or links yet is looked at.",
)
@click.pass_context
def pagerank_command(
    ctx: click.Context,
    iterations: int,
    damping: float,
    tol: float,
    slaves: int,
    skip_internal: bool,
    shards: int | None,
    every: float | None,
    poll: float,
) -> None:
    """Rank every stored page with PageRank over the job's slaves; store the ranks."""
    from srcrawl.app.runner import PhaseRun
    from srcrawl.pagerank.job import RankOptions, rank_job
    from srcrawl.pagerank.master import PHASE, RankParams

    cfg = _config(ctx)
    cfg.check()
    if every is not None and every <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--every")
    if poll <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--poll")
    params = RankParams(iterations=iterations, damping=damping, tol=tol)
    options = RankOptions(skip_internal=skip_internal, shards=shards)
    with PhaseRun(cfg, PHASE, slaves) as run:
        if every is None:
            click.echo(
                _closing_line(rank_job(cfg, params, options, slaves=run.local, echo=click.echo))
            )
            return
        _rank_every(cfg, run.local, params, options, every, poll)


def _rank_every(
    cfg: Config,
    local: SlaveProcesses | None,
    params: RankParams,
    options: RankOptions,
    every: float,
    poll: float,
) -> None:
    """`pagerank --every`: a run as soon as there are pages and links, then one every
    ``every`` seconds, until SIGTERM or Ctrl-C."""
    from srcrawl.core.outage import REDIS_DOWN
    from srcrawl.core.signals import stop_gently
    from srcrawl.core.telemetry import record_rank_run
    from srcrawl.pagerank.errors import PageRankError
    from srcrawl.pagerank.job import rank_job

    stopping = threading.Event()
    runs = 0
    with stop_gently(stopping):
        while not stopping.is_set():
            if runs == 0 and not _first_pages(cfg, poll, stopping):
                break
            began = time.monotonic()
            try:
                result = rank_job(
                    cfg, params, options, slaves=local, echo=click.echo, stopping=stopping
                )
            except REDIS_DOWN as e:
                if not stopping.is_set():
                    raise
                # told to stop while Redis was gone: the run is dropped, not waited out
                raise click.ClickException(
                    f"pagerank --every stopped during a Redis outage ({e}); "
                    f"the run in progress did not finish, after {runs} whole run(s)"
                ) from None
            except PageRankError as e:  # the store was emptied meanwhile
                record_rank_run(cfg.redis(), cfg.keys, time.monotonic() - began, ok=False)
                click.echo(f"srcrawl: {e}; trying again in {every:g} s", err=True)
            else:
                record_rank_run(cfg.redis(), cfg.keys, time.monotonic() - began, ok=True)
                runs += 1
                click.echo(f"{_closing_line(result)}; run {runs}, next in {every:g} s")
            _wait_for_turn(cfg, every, stopping)
    click.echo(f"pagerank --every stopped after {runs} run(s)")


def _wait_for_turn(cfg: Config, seconds: float, stopping: threading.Event) -> None:
    """Wait ``seconds`` (or until stopped), saying meanwhile that this process waits for
    the PageRank lease: a ranker between runs is doing its job (srcrawl/app/health.py)."""
    from srcrawl.pagerank.master import PHASE
    from srcrawl.queues.lease import clear_waiting, holder_id, mark_waiting

    holder = holder_id("pagerank-master")
    deadline = time.monotonic() + seconds
    while not stopping.is_set() and time.monotonic() < deadline:
        mark_waiting(cfg.redis(), cfg.keys.master_lease(PHASE), holder)
        stopping.wait(min(DEFAULT_LEASE_WAITING_RENEW, max(0.0, deadline - time.monotonic())))
    if stopping.is_set():
        clear_waiting(cfg.redis(), cfg.keys.master_lease(PHASE))


def _first_pages(cfg: Config, poll: float, stopping: threading.Event) -> bool:
    """Wait until the store holds pages and links (looking every ``poll`` seconds): a ranker
    started with the crawl ranks its first pages then, not ``--every`` later. False: it
    was stopped meanwhile."""
    store = cfg.store()
    said = False
    while not stopping.is_set():
        if store.has_rows("pages") and store.has_rows("links"):
            return True
        if not said:
            click.echo(
                f"srcrawl: the store has no pages and links yet; looking again every {poll:g} s",
                err=True,
            )
            said = True
        _wait_for_turn(cfg, poll, stopping)
    return False


def _closing_line(result: RankResult) -> str:
    last = result.reports[-1]
    state = "converged" if result.converged else "stopped"
    return (
        f"pagerank {state} after {last.iteration} iterations (L1 change {last.delta:.3e}); "
        f"{sum(r.seconds for r in result.reports):.2f} s iterating"
        + (f", {result.requeued} task(s) of dead slaves recomputed" if result.requeued else "")
    )


@click.command("ranks")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the top N pages.")
@click.pass_context
def export_ranks(ctx: click.Context, limit: int | None) -> None:
    """`url<TAB>rank` per ranked page, highest rank first."""
    store = _config(ctx).store()
    out = sys.stdout
    for url, score in store.top_ranks(limit):
        out.write(f"{url}\t{score!r}\n")
