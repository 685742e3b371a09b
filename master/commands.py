"""Command line of the crawl: `master start`, `crawl`, `seed`, `export pages|links`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from srcrawl.defaults import (
    DEFAULT_BLOOM_ERROR_RATE,
    DEFAULT_DELAY,
    DEFAULT_DELAY_FACTOR,
    DEFAULT_FETCH_THREADS,
    DEFAULT_FETCH_TRIES,
    DEFAULT_HASH_BUCKETS,
    DEFAULT_MAX_DELAY,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_ROBOTS_DEFER,
)
from srcrawl.errors import ConfigError
from srcrawl.master.strategy import QUEUE_POLICIES, CrawlStrategy
from srcrawl.scaling import ProgressLine, check_outputs, parse_slave_counts, scaling_options


def crawl_options(f: Callable) -> Callable:
    """Scope, politeness and policy options shared by `crawl` and `master start`."""
    options = [
        click.option("--depth", "max_depth", default=DEFAULT_MAX_DEPTH, show_default=True,
                     help="Link hops from the seeds to follow (a redirect is one hop)."),
        click.option("--allow-domain", multiple=True,
                     help="Also crawl this domain and its subdomains (repeatable)."),
        click.option("--allow", multiple=True, help="Only crawl URLs matching a regex."),
        click.option("--deny", multiple=True, help="Never crawl URLs matching a regex."),
        click.option("--max-pages-per-host", default=0, show_default=True, help="0: no cap."),
        click.option("--delay", default=DEFAULT_DELAY, show_default=True,
                     help="Minimum seconds between two requests to one host."),
        click.option("--delay-factor", default=DEFAULT_DELAY_FACTOR, show_default=True,
                     help="Wait this × the last fetch time before the next request to the host."),
        click.option("--max-delay", default=DEFAULT_MAX_DELAY, show_default=True,
                     help="The wait never exceeds this (robots Crawl-delay aside)."),
        click.option("--queue-policy", type=click.Choice(QUEUE_POLICIES), default="host",
                     show_default=True,
                     help="host: one request in flight per host (polite). hash: URLs spread "
                          "over --hash-buckets queues, trading politeness for parallelism."),
        click.option("--hash-buckets", default=DEFAULT_HASH_BUCKETS, show_default=True),
        click.option("--bloom-error-rate", default=DEFAULT_BLOOM_ERROR_RATE, show_default=True),
        click.option("--fetch-timeout", default=DEFAULT_READ_TIMEOUT, show_default=True,
                     help="Seconds to wait for a response's bytes."),
        click.option("--max-page-bytes", default=DEFAULT_MAX_PAGE_BYTES, show_default=True,
                     help="Bytes of a body to read; the rest is cut off."),
        click.option("--robots-defer", default=DEFAULT_ROBOTS_DEFER, show_default=True,
                     help="Seconds a host waits after its robots.txt failed (5xx, timeout)."),
        click.option("--fetch-tries", default=DEFAULT_FETCH_TRIES, show_default=True,
                     help="Fetches of a URL failing for a passing reason (timeout, broken or "
                          "cut-off response, 5xx, 429) before it is stored as failed."),
        click.option("--retry-backoff", default=DEFAULT_RETRY_BACKOFF, show_default=True,
                     help="Seconds before a failed URL's second try, doubled for each next."),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


def strategy_from(opts: dict[str, Any]) -> CrawlStrategy:
    return CrawlStrategy(
        allow_domains=tuple(opts["allow_domain"]),
        allow=tuple(opts["allow"]),
        deny=tuple(opts["deny"]),
        max_depth=opts["max_depth"],
        max_pages_per_host=opts["max_pages_per_host"],
        delay=opts["delay"],
        delay_factor=opts["delay_factor"],
        max_delay=opts["max_delay"],
        queue_policy=opts["queue_policy"],
        hash_buckets=opts["hash_buckets"],
        bloom_error_rate=opts["bloom_error_rate"],
        fetch_timeout=opts["fetch_timeout"],
        max_page_bytes=opts["max_page_bytes"],
        robots_defer=opts["robots_defer"],
        fetch_tries=opts["fetch_tries"],
        retry_backoff=opts["retry_backoff"],
    )


def _config(ctx: click.Context):
    from srcrawl.cli import config_of

    return config_of(ctx)


@click.group("master")
def master_group() -> None:
    """The crawl master (what the docker compose master container runs)."""


@master_group.command("start")
@click.argument("seeds", nargs=-1)
@crawl_options
@click.option("--keep-running", is_flag=True, help="Wait for new seeds once the crawl is complete.")
@click.pass_context
def master_start(
    ctx: click.Context, seeds: tuple[str, ...], keep_running: bool, **opts: Any
) -> None:
    """Run the crawl master of the job. With SEEDS, start a new crawl first."""
    from srcrawl.master.crawl_master import CrawlMaster
    from srcrawl.master.crawl_run import start_crawl

    cfg = _config(ctx)
    cfg.check()
    if seeds:
        start_crawl(cfg, seeds, strategy_from(opts))
    master = CrawlMaster(cfg, wait_for_work=keep_running)
    master.install_signal_handlers()
    complete = master.run(keep_running=keep_running)
    c = master.counters()
    click.echo(
        f"crawl {'complete' if complete else 'stopped'}: {c.get('pages', 0)} pages, "
        f"{c.get('scheduled', 0)} URLs scheduled", err=True,
    )  # fmt: skip


@click.command("crawl")
@click.argument("seeds", nargs=-1)
@crawl_options
@click.option("--slaves", default=4, show_default=True, help="Local slave processes.")
@click.option("--threads", default=DEFAULT_FETCH_THREADS, show_default=True,
              help="Fetch threads per slave.")  # fmt: skip
@click.option("--parser", type=click.Choice(["lxml", "bs4"]), default="lxml", show_default=True)
@click.option("--resume", is_flag=True, help="Continue the job's interrupted crawl.")
@click.pass_context
def crawl_command(
    ctx: click.Context, seeds: tuple[str, ...], slaves: int, threads: int, parser: str,
    resume: bool, **opts: Any,
) -> None:  # fmt: skip
    """Crawl from SEEDS with a master and --slaves local slaves until done."""
    from srcrawl.master import strategy as strategies
    from srcrawl.master.crawl_run import run_local_crawl, start_crawl

    cfg = _config(ctx)
    cfg.check()
    if slaves < 1:
        raise ConfigError("--slaves must be at least 1 (or run `srcrawl master start` alone)")
    if resume:
        if strategies.load(cfg.redis(), cfg.keys) is None:
            raise ConfigError(f"job {cfg.job!r} has no crawl to resume")
        if seeds:
            raise ConfigError("--resume continues the crawl as it was: give no seeds")
    else:
        start_crawl(cfg, seeds, strategy_from(opts))
    tty = sys.stderr.isatty()
    last = [0.0]

    def report(p: dict[str, int], elapsed: float) -> None:
        if not tty and elapsed - last[0] < 5 and p.get("queued", 1) + p.get("in_flight", 1):
            return
        last[0] = elapsed
        rate = p.get("pages", 0) / elapsed if elapsed > 0 else 0.0
        line = (
            f"pages {p.get('pages', 0)}  queued {p['queued']}  in flight {p['in_flight']}  "
            f"{rate:.1f} pages/s  errors {p.get('fetch_errors', 0)}  {elapsed:.0f}s"
        )
        click.echo(("\r" + line + "  ") if tty else line, nl=not tty, err=True)

    try:
        final = run_local_crawl(
            cfg,
            slaves=slaves,
            slave_args=["--threads", str(threads), "--parser", parser],
            report=report,
        )
    except KeyboardInterrupt:
        click.echo(
            f"\nsrcrawl: interrupted; `srcrawl --job {cfg.job} crawl --resume` continues", err=True
        )
        sys.exit(130)
    if tty:
        click.echo("", err=True)
    click.echo(json.dumps({"job": cfg.job, **final}, sort_keys=True))


@click.command("seed")
@click.argument("urls", nargs=-1, required=True)
@click.pass_context
def seed_command(ctx: click.Context, urls: tuple[str, ...]) -> None:
    """Add seed URLs (and their hosts to the scope) to the job's crawl."""
    from srcrawl.master.crawl_run import add_seeds

    cfg = _config(ctx)
    add_seeds(cfg, urls)
    click.echo(f"{len(urls)} seed(s) queued for job {cfg.job}")


@click.command("pages")
@click.pass_context
def export_pages(ctx: click.Context) -> None:
    """One JSON object per fetched URL: url, status, depth, content_type, title, error,
    body_state."""
    store = _config(ctx).store()
    out = sys.stdout
    for p in store.iter_pages():
        record = {"url": p.url, "status": p.status, "depth": p.depth,
                  "content_type": p.content_type, "title": p.title, "error": p.error,
                  "body_state": p.body_state}  # fmt: skip
        out.write(json.dumps(record, ensure_ascii=False) + "\n")


@click.command("links")
@click.pass_context
def export_links(ctx: click.Context) -> None:
    """`source<TAB>target` per stored link between two stored pages."""
    store = _config(ctx).store()
    out = sys.stdout
    for src, dst in store.iter_link_urls():
        out.write(f"{src}\t{dst}\n")


@click.command("master")
@click.option("--urls", default=1_000_000, show_default=True, help="Links in the stream.")
@click.option("--hosts", default=20, show_default=True)
@click.pass_context
def bench_master(ctx: click.Context, urls: int, hosts: int) -> None:
    """URLs/s through the master: canonicalize + scope + seen test, then with Redis commits."""
    from srcrawl.master.benchmark import run_master_benchmark

    click.echo(run_master_benchmark(_config(ctx), urls=urls, hosts=hosts).render())


@click.command("crawl")
@click.option(
    "--hosts",
    # many small hosts: with one request in flight per host, 8 slaves × 4
    # threads need ≥ 32 hosts with work until the end of every depth level
    default=257,
    show_default=True,
    type=click.IntRange(2),
    help="Hosts of the synthetic web (host 0, the special pages, is not crawled).",
)
@click.option(
    "--pages", default=20, show_default=True, type=click.IntRange(1), help="Pages per host."
)
@click.option(
    "--latency-ms",
    default=200.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Per-response latency (0: the machine's ceiling).",
)
@click.option(
    "--threads",
    default=4,
    show_default=True,
    type=click.IntRange(1),
    help="Fetch threads per slave.",
)
@click.option("--depth", default=8, show_default=True, type=click.IntRange(0))
@click.option(
    "--peer",
    type=click.Choice(["scrapy"]),
    default=None,
    help="Also crawl the same web with a plain Scrapy spider at the same concurrency.",
)
@scaling_options(default_slaves="1,2,4,8", throughput="pages/s", rounds=True)
@click.pass_context
def bench_crawl(
    ctx: click.Context,
    slaves_text: str,
    rounds: int,
    hosts: int,
    pages: int,
    latency_ms: float,
    threads: int,
    depth: int,
    peer: str | None,
    json_path: str | None,
    plot_path: str | None,
) -> None:
    """Pages/s crawling the synthetic web with 1, 2, 4 … slaves (politeness off: our own site)."""
    from srcrawl.master.crawl_benchmark import run_crawl_benchmark

    counts = parse_slave_counts(slaves_text)
    check_outputs(json_path=json_path, plot_path=plot_path)
    if peer == "scrapy":
        from srcrawl.master.scrapy_peer import require_scrapy

        require_scrapy()
    cfg = _config(ctx)
    cfg.check()
    line = ProgressLine()
    try:
        result = run_crawl_benchmark(
            cfg,
            slave_counts=counts,
            hosts=hosts,
            pages=pages,
            latency_ms=latency_ms,
            threads=threads,
            depth=depth,
            peer=peer,
            rounds=rounds,
            progress=line.update,
        )
    finally:
        line.done()
    result.save(json_path=json_path, plot_path=plot_path)
    click.echo(result.render())
