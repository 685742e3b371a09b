"""Command line of the crawl: `master start`, `crawl`, `seed`, `export pages|links`."""

from __future__ import annotations

import collections
import json
import sys
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import click

from srcrawl.app.cli_options import BYTE_SIZE, DURATION, fetches_option
from srcrawl.app.durations import format_duration
from srcrawl.core.defaults import (
    BODY_STORES,
    DEFAULT_BLOOM_ERROR_RATE,
    DEFAULT_DELAY,
    DEFAULT_DELAY_FACTOR,
    DEFAULT_FETCH_THREADS,
    DEFAULT_FETCH_TRIES,
    DEFAULT_HASH_BUCKETS,
    DEFAULT_LAG_AFTER,
    DEFAULT_MAX_DELAY,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_MAX_REDIS_MEMORY,
    DEFAULT_MAX_REVISIT,
    DEFAULT_MIN_FREE_DISK,
    DEFAULT_MIN_REVISIT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_REVISIT,
    DEFAULT_REVISIT_POLICIES,
    DEFAULT_ROBOTS_DEFER,
    DEFAULT_ROBOTS_TTL,
    DEFAULT_SITEMAP_EVERY,
    DEFAULT_USER_AGENT,
    DEFAULT_WARC_MAX_BYTES,
    MAX_PARTITIONS,
)
from srcrawl.core.errors import ConfigError
from srcrawl.core.progress import ProgressLine
from srcrawl.core.useragent import ENV_USER_AGENT, contact_warning
from srcrawl.master.guards import ENV_MAX_REDIS_MEMORY, ENV_MIN_FREE_DISK
from srcrawl.queues.crawl_strategy import QUEUE_POLICIES, CrawlStrategy
from srcrawl.settings.config import Config

EXIT_DEFERRED = 3
"""`srcrawl crawl`'s exit status when the crawl ended with hosts whose robots.txt could not
be had (their URLs wait in the frontier for `--resume`)."""
HOST_ERRORS_SHOWN = 10
"""Hosts whose robots.txt failures `srcrawl crawl` tells of (then `srcrawl status`)."""
POLITENESS_WINDOW = 6
"""Progress samples (every half second) of which most must find the crawl waiting on
politeness before the progress line says so."""


def _sitemap_and_storage_options() -> list[Callable]:
    """Where a crawl keeps the bodies, and its sitemaps (part of :func:`crawl_options`)."""
    return [
        click.option(
            "--sitemaps/--no-sitemaps",
            default=True,
            show_default=True,
            help="Read each host's sitemaps (the Sitemap: lines of its robots.txt, "
            "else /sitemap.xml, one request): their pages are seeds, their "
            "lastmod kept for the recrawl.",
        ),
        click.option(
            "--sitemap-every",
            type=DURATION,
            default=format_duration(DEFAULT_SITEMAP_EVERY),
            show_default=True,
            help="How often an always-on crawl reads each host's sitemaps again: a "
            "stored page whose lastmod is newer than its last fetch is fetched "
            "again at once (within its host's politeness).",
        ),
        click.option(
            "--body-store",
            type=click.Choice(BODY_STORES),
            default=BODY_STORES[0],
            show_default=True,
            help="Where bodies are kept: WARC files in $SRCRAWL_WARC_DIR (default "
            "$SRCRAWL_HOME/warc), the store pointing into them; or in the store.",
        ),
        click.option(
            "--warc-max-bytes",
            default=DEFAULT_WARC_MAX_BYTES,
            show_default=True,
            type=click.IntRange(1),
            help="Bytes after which a slave starts a new WARC file.",
        ),
    ]


def _revisit_options() -> list[Callable]:
    """The recrawl schedule's options (see queues/crawl_strategy.py next_revisit)."""
    return [
        click.option(
            "--revisit",
            type=DURATION,
            default=format_duration(DEFAULT_REVISIT),
            show_default=True,
            help="When a stored page is fetched again after its first fetch "
            "(90s, 6h, 1d); a master with --keep-running does it.",
        ),
        click.option(
            "--min-revisit",
            type=DURATION,
            default=format_duration(DEFAULT_MIN_REVISIT),
            show_default=True,
            help="Shortest interval of a page that keeps changing.",
        ),
        click.option(
            "--max-revisit",
            type=DURATION,
            default=format_duration(DEFAULT_MAX_REVISIT),
            show_default=True,
            help="Longest interval of a page that never changes (or went away).",
        ),
        click.option(
            "--revisit-policy",
            type=click.Choice(DEFAULT_REVISIT_POLICIES),
            default="adaptive",
            show_default=True,
            help="adaptive: each page at the interval its estimated change rate "
            "earns (Cho & Garcia-Molina): never-changing pages at "
            "--max-revisit, pages changing too fast to keep fresh given up; "
            "nutch: 20% sooner after a change, 40% later without (Nutch's "
            "AdaptiveFetchSchedule); uniform: every page at --revisit.",
        ),
    ]


def _frontier_options() -> list[Callable]:
    """How the frontier is cut up: queues per host or hash bucket, and partitions."""
    return [
        click.option(
            "--per-host",
            default=1,
            show_default=True,
            type=click.IntRange(1),
            help="Most requests in flight to one host across the whole cluster "
            "(Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN, Nutch's "
            "fetcher.threads.per.queue): each host's URLs are spread over 4N "
            "queues that take its N request slots in turn, each slot waiting "
            "--delay / --delay-factor after its response; a robots.txt "
            "Crawl-delay holds its host to 1. For sites you own.",
        ),
        click.option(
            "--queue-policy",
            type=click.Choice(QUEUE_POLICIES),
            default="host",
            show_default=True,
            help="host: queues per host, at most --per-host requests in flight to "
            "one host (polite). hash: URLs spread over --hash-buckets queues "
            "whatever their host, so one host may have them all in flight: no "
            "per-host limit at all.",
        ),
        click.option("--hash-buckets", default=DEFAULT_HASH_BUCKETS, show_default=True),
        click.option(
            "--partitions",
            default=1,
            show_default=True,
            type=click.IntRange(1, MAX_PARTITIONS),
            help="Ranges of the host hash the frontier is divided into, each with its "
            "own Redis keys (spread over a Redis Cluster's nodes) and its own "
            "master lease: any number of `master start` processes share them.",
        ),
    ]


def _guard_options() -> list[Callable]:
    """What pauses the crawl before a volume or Redis runs full (master/guards.py)."""
    return [
        click.option(
            "--min-free-disk",
            type=BYTE_SIZE,
            envvar=ENV_MIN_FREE_DISK,
            default=DEFAULT_MIN_FREE_DISK,
            show_default=f"{DEFAULT_MIN_FREE_DISK / 2**30:g}G",
            help="Pause fetching and URL admission while the WARC or store volume "
            f"has less free (512M, 2G) [env {ENV_MIN_FREE_DISK}].",
        ),
        click.option(
            "--max-redis-memory",
            type=BYTE_SIZE,
            envvar=ENV_MAX_REDIS_MEMORY,
            default=DEFAULT_MAX_REDIS_MEMORY,
            show_default=True,
            help="Admit no new URL while Redis uses more (queued URLs are fetched "
            "on); 0: 90% of Redis's maxmemory, if set "
            f"[env {ENV_MAX_REDIS_MEMORY}].",
        ),
    ]


def _scope_and_politeness_options() -> list[Callable]:
    """What a crawl follows, and how long it waits between two requests to a host (part
    of :func:`crawl_options`)."""
    return [
        click.option(
            "--depth",
            "max_depth",
            default=DEFAULT_MAX_DEPTH,
            show_default=True,
            help="Link hops from the seeds to follow (a redirect is one hop).",
        ),
        click.option(
            "--allow-domain",
            multiple=True,
            help="Also crawl this domain and its subdomains (repeatable).",
        ),
        click.option("--allow", multiple=True, help="Only crawl URLs matching a regex."),
        click.option("--deny", multiple=True, help="Never crawl URLs matching a regex."),
        click.option(
            "--max-pages-per-host",
            default=0,
            show_default=True,
            type=click.IntRange(0),
            help="0: no cap.",
        ),
        click.option(
            "--delay",
            default=DEFAULT_DELAY,
            show_default=True,
            help="Minimum seconds between two requests to one host.",
        ),
        click.option(
            "--delay-factor",
            default=DEFAULT_DELAY_FACTOR,
            show_default=True,
            help="Wait this × the last fetch time before the next request to the host.",
        ),
        click.option(
            "--max-delay",
            default=DEFAULT_MAX_DELAY,
            show_default=True,
            help="The wait never exceeds this (robots Crawl-delay aside).",
        ),
    ]


def _fetch_options() -> list[Callable]:
    """How a fetch reads a response, and how long a host waits on its robots.txt (part of
    :func:`crawl_options`)."""
    return [
        click.option(
            "--fetch-timeout",
            default=DEFAULT_READ_TIMEOUT,
            show_default=True,
            help="Seconds to wait for a response's bytes.",
        ),
        click.option(
            "--max-page-bytes",
            default=DEFAULT_MAX_PAGE_BYTES,
            show_default=True,
            help="Bytes of a body to read; the rest is cut off.",
        ),
        click.option(
            "--robots-defer",
            default=DEFAULT_ROBOTS_DEFER,
            show_default=True,
            help="Seconds a host waits after its robots.txt failed (5xx, timeout).",
        ),
        # tests scale the deferrals down and this with them, so the lagging path still runs
        click.option(
            "--lag-after",
            default=DEFAULT_LAG_AFTER,
            show_default=True,
            hidden=True,
            help="A robots.txt deferral this long or longer no longer holds the depth levels.",
        ),
        click.option(
            "--robots-ttl",
            type=DURATION,
            default=format_duration(DEFAULT_ROBOTS_TTL),
            show_default=True,
            help="How long a host's robots.txt is cached (30s, 1h).",
        ),
    ]


def _request_options() -> list[Callable]:
    """Who the requests say they are, where they may go, and how failures are tried again
    (part of :func:`crawl_options`)."""
    return [
        click.option(
            "--user-agent",
            envvar=ENV_USER_AGENT,
            default=DEFAULT_USER_AGENT,
            show_default=True,
            help="User-Agent of every request: your crawler's name and a contact URL "
            "or e-mail; robots.txt rules are matched against the name "
            f"[env {ENV_USER_AGENT}].",
        ),
        click.option(
            "--allow-private",
            is_flag=True,
            help="Let requests go to loopback, private and link-local addresses "
            "(a seed's own IP-literal or localhost origin needs no opt-in).",
        ),
        click.option(
            "--allow-network",
            multiple=True,
            metavar="CIDR",
            help="Let requests go to the addresses of this network (repeatable).",
        ),
        click.option(
            "--fetch-tries",
            default=DEFAULT_FETCH_TRIES,
            show_default=True,
            help="Fetches of a URL failing for a passing reason (timeout, broken or "
            "cut-off response, 5xx, 429) before it is stored as failed.",
        ),
        click.option(
            "--retry-backoff",
            default=DEFAULT_RETRY_BACKOFF,
            show_default=True,
            help="Seconds before a failed URL's second try, doubled for each next.",
        ),
    ]


def crawl_options(f: Callable) -> Callable:
    """Scope, politeness and policy options shared by `crawl` and `master start`."""
    options = [
        *_scope_and_politeness_options(),
        *_frontier_options(),
        click.option("--bloom-error-rate", default=DEFAULT_BLOOM_ERROR_RATE, show_default=True),
        *_fetch_options(),
        *_request_options(),
        *_sitemap_and_storage_options(),
        *_revisit_options(),
        *_guard_options(),
    ]
    for option in reversed(options):
        f = option(f)
    return f


_RENAMED = {"allow_domain": "allow_domains", "allow_network": "allow_networks"}
"""Crawl options whose strategy field has another name (repeatable options, plural fields)."""


def field_of(option: str) -> str:
    """The CrawlStrategy field a crawl option sets."""
    return _RENAMED.get(option, option)


def strategy_from(opts: dict[str, Any]) -> CrawlStrategy:
    """The strategy the crawl options ``opts`` (as click names them) describe."""
    known = {f.name for f in fields(CrawlStrategy)}
    values = {
        field_of(k): (tuple(v) if isinstance(v, (list, tuple)) else v)
        for k, v in opts.items()
        if field_of(k) in known
    }
    return CrawlStrategy(**values)


def warn_without_contact(strategy: CrawlStrategy) -> None:
    """One line on stderr when the crawl reaches other machines with an anonymous agent."""
    warning = contact_warning(strategy.user_agent, [*strategy.seed_hosts, *strategy.allow_domains])
    if warning:
        click.echo(f"srcrawl: {warning}", err=True)


FIXED_ON_RESUME = {
    "max_depth": "--depth",
    "allow_domain": "--allow-domain",
    "allow": "--allow",
    "deny": "--deny",
    "queue_policy": "--queue-policy",
    "hash_buckets": "--hash-buckets",
    "per_host": "--per-host",
    "bloom_error_rate": "--bloom-error-rate",
    "partitions": "--partitions",
}
"""Options a resumed crawl cannot change: links already judged by the scope and depth are
not judged again, queues are assigned (a host's URLs already spread over --per-host queues)
and the seen set is sized."""


def given_options(ctx: click.Context, opts: dict[str, Any]) -> dict[str, Any]:
    """The crawl options the user named (command line or environment), not the defaults."""
    from click.core import ParameterSource

    defaulted = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)
    return {k: v for k, v in opts.items() if ctx.get_parameter_source(k) not in defaulted}


def resumed_strategy(current: CrawlStrategy, given: dict[str, Any]) -> CrawlStrategy | None:
    """``current`` with the options given for a resume, or None when none were given.

    Raises ConfigError naming the options a running crawl cannot take.
    """
    fixed = [flag for name, flag in FIXED_ON_RESUME.items() if name in given]
    if fixed:
        raise ConfigError(
            f"{', '.join(fixed)} cannot change on --resume (the crawl so far was decided by "
            "it); start a new crawl instead"
        )
    if not given:
        return None
    new = strategy_from({**asdict_options(current), **given})
    return replace(current, **{field_of(n): getattr(new, field_of(n)) for n in given})


def asdict_options(strategy: CrawlStrategy) -> dict[str, Any]:
    """The crawl options (as :func:`crawl_options` names them) that give ``strategy``."""
    inverse = {f: o for o, f in _RENAMED.items()}
    return {inverse.get(f.name, f.name): getattr(strategy, f.name) for f in fields(strategy)}


def _config(ctx: click.Context) -> Config:
    """The configuration the root command loaded."""
    return ctx.find_root().obj


@click.group("master")
def master_group() -> None:
    """The crawl master (what the docker compose master container runs)."""


@master_group.command("start")
@click.argument("seeds", nargs=-1)
@crawl_options
@click.option(
    "--keep-running",
    is_flag=True,
    help="Run always: wait for new seeds once the crawl is complete, and fetch "
    "every stored page again when its revisit interval is over.",
)
@click.pass_context
def master_start(
    ctx: click.Context, seeds: tuple[str, ...], keep_running: bool, **opts: Any
) -> None:
    """Run the crawl master of the job. With SEEDS, start a new crawl first."""
    from srcrawl.app.child import run_crawl_master
    from srcrawl.app.roles import CrawlMasterRole
    from srcrawl.core.outage import REDIS_DOWN
    from srcrawl.master.crawl_run import start_crawl

    cfg = _config(ctx)
    cfg.check()
    if seeds:
        warn_without_contact(start_crawl(cfg, seeds, strategy_from(opts)))
    complete, master = run_crawl_master(cfg, CrawlMasterRole(keep_running=keep_running))
    try:
        c = master.counters()
    except REDIS_DOWN:  # stopped while Redis was away: the master said so
        return
    click.echo(
        f"crawl {'complete' if complete else 'stopped'}: {c.get('pages', 0)} pages, "
        f"{c.get('scheduled', 0)} URLs scheduled",
        err=True,
    )


@click.command("crawl")
@click.argument("seeds", nargs=-1)
@crawl_options
@click.option("--slaves", default=4, show_default=True, help="Local slave processes.")
@fetches_option(
    DEFAULT_FETCH_THREADS, "Fetches each slave keeps in flight (one thread drives them)."
)
@click.option("--parser", type=click.Choice(["lxml", "bs4"]), default="lxml", show_default=True)
@click.option("--resume", is_flag=True, help="Continue the job's interrupted crawl.")
@click.pass_context
def crawl_command(
    ctx: click.Context,
    seeds: tuple[str, ...],
    slaves: int,
    fetches: int,
    parser: str,
    resume: bool,
    **opts: Any,
) -> None:
    """Crawl from SEEDS with a master and --slaves local slaves until done."""
    from srcrawl.app.runner import run_local_crawl
    from srcrawl.core.signals import exit_code_of
    from srcrawl.master.crawl_run import start_crawl
    from srcrawl.master.crawl_summary import crawl_summary, summary_line
    from srcrawl.queues import crawl_strategy as strategies

    cfg = _config(ctx)
    cfg.check()
    if slaves < 1:
        raise ConfigError("--slaves must be at least 1 (or run `srcrawl master start` alone)")
    if resume:
        current = strategies.load(cfg.redis(), cfg.keys)
        if current is None:
            raise ConfigError(f"job {cfg.job!r} has no crawl to resume")
        if seeds:
            raise ConfigError("--resume continues the crawl as it was: give no seeds")
        changed = resumed_strategy(current, given_options(ctx, opts))
        if changed is not None:
            # a new version: the master and every slave follow it
            strategies.publish(cfg.redis(), cfg.keys, changed)
    else:
        warn_without_contact(start_crawl(cfg, seeds, strategy_from(opts)))
    line = ProgressLine()
    watch = _CrawlWatch(cfg, line)
    try:
        final = run_local_crawl(
            cfg, slaves=slaves, threads=fetches, parser=parser, report=watch.report
        )
    except KeyboardInterrupt as e:  # SIGINT or SIGTERM: every child has been stopped
        line.say(f"srcrawl: interrupted; `srcrawl --job {cfg.job} crawl --resume` continues")
        sys.exit(exit_code_of(e))
    finally:
        line.done()
    deferred = watch.deferred_hosts()
    click.echo(json.dumps(crawl_summary(cfg.job, final, deferred), sort_keys=True))
    failed = watch.nothing_fetched(final)
    if failed:
        line.say(f"srcrawl: {failed}")
        sys.exit(1)
    line.say(summary_line(final, cfg.job, deferred))
    if deferred:
        line.say(watch.deferred_note(deferred))
        sys.exit(EXIT_DEFERRED)


class _CrawlWatch:
    """What `srcrawl crawl` shows while its crawl runs: the progress line, and a line
    for each host whose robots.txt could not be had (once per change)."""

    def __init__(self, cfg: Any, line: ProgressLine) -> None:
        self.cfg = cfg
        self.line = line
        self.shown: dict[str, dict] = {}
        self.bound: collections.deque[str | None] = collections.deque(maxlen=POLITENESS_WINDOW)
        self.told_politeness = False

    def report(self, p: dict[str, int], elapsed: float) -> None:
        from srcrawl.master.crawl_run import (
            BACKING_OFF,
            describe_host_error,
            host_errors,
            waiting_on,
        )

        for host, record in host_errors(self.cfg).items():
            # a host shown already is shown again at each try, however many others are
            known = host in self.shown or len(self.shown) < HOST_ERRORS_SHOWN
            if self.shown.get(host) != record and known:
                self.shown[host] = record
                self.line.say(describe_host_error(host, record))
        self.bound.append(waiting_on(self.cfg))
        rate = p.get("pages", 0) / elapsed if elapsed > 0 else 0.0
        text = (
            f"pages {p.get('pages', 0)}  queued {p['queued']}  in flight {p['in_flight']}  "
            f"{rate:.1f} pages/s  errors {p.get('fetch_errors', 0)}  {elapsed:.0f}s"
        )
        waits = [b for b in self.bound if b]
        if len(self.bound) == self.bound.maxlen and len(waits) > len(self.bound) * 3 // 4:
            if waits.count(BACKING_OFF) * 2 >= len(waits):  # retries wait, not politeness
                text += "  (backing off: failed fetches wait --retry-backoff to try again)"
                self.line.update(text, force=p["queued"] + p["in_flight"] == 0)
                return
            text += "  (waiting on politeness: see --delay, --delay-factor)"
            if not self.told_politeness:
                self.told_politeness = True
                self.line.say(self._politeness_note())
        self.line.update(text, force=p["queued"] + p["in_flight"] == 0)

    def _politeness_note(self) -> str:
        from srcrawl.queues import crawl_strategy as strategies

        s = strategies.load(self.cfg.redis(), self.cfg.keys) or CrawlStrategy()
        at_once = "one request" if s.per_host == 1 else f"{s.per_host} requests (--per-host)"
        return (
            f"srcrawl: the crawl is waiting on politeness, not on the network: each host gets "
            f"{at_once} at a time, then waits --delay {s.delay:g} s or --delay-factor "
            f"{s.delay_factor:g} x the fetch time, whichever is longer; on a site you own, "
            "--delay 0 --delay-factor 0 lifts it and --per-host N fetches N of its pages at once"
        )

    def deferred_hosts(self) -> list[str]:
        """The hosts whose robots.txt could not be had when the crawl ended (their URLs
        are left in the frontier)."""
        from srcrawl.master.crawl_master import crawl_state

        return crawl_state(self.cfg).get("deferred", "").split()

    def deferred_note(self, hosts: list[str]) -> str:
        from srcrawl.master.crawl_run import host_errors

        errors = host_errors(self.cfg)
        said = [f"{h} (robots.txt: {errors.get(h, {}).get('reason', 'deferred')})" for h in hosts]
        return (
            f"srcrawl: {len(hosts)} host{'s' if len(hosts) > 1 else ''} left uncrawled, "
            f"{'their' if len(hosts) > 1 else 'its'} robots.txt not to be had: "
            + "; ".join(said)
            + f". `srcrawl --job {self.cfg.job} crawl --resume` tries again "
            "(an always-on master, `srcrawl master start --keep-running`, keeps retrying)"
        )

    def nothing_fetched(self, final: dict[str, int]) -> str | None:
        """Why no page at all could be fetched, or None when some were."""
        if final.get("pages", 0) > final.get("fetch_errors", 0):
            return None
        from srcrawl.master.crawl_run import describe_host_error, host_errors

        deferred = set(self.deferred_hosts())
        reasons = [
            f"{h}: {r.get('what', 'robots.txt')}: {r.get('reason', 'failed')}; left for "
            f"`srcrawl --job {self.cfg.job} crawl --resume`"
            if h in deferred
            else describe_host_error(h, r)
            for h, r in host_errors(self.cfg).items()
        ]
        if final.get("robots_disallowed"):
            reasons.append(f"{final['robots_disallowed']} URLs disallowed by robots.txt")
        if final.get("fetch_errors"):
            reasons.append(f"{final['fetch_errors']} fetches failed (see `srcrawl export pages`)")
        return "no seed could be fetched: " + ("; ".join(reasons) or "nothing was scheduled")


EXIT_SEEDS_REFUSED = 1
"""`srcrawl seed`'s exit status when the address policy refused a seed (2: bad usage)."""


@click.command("seed")
@click.argument("urls", nargs=-1, required=True)
@click.option(
    "--allow-private",
    is_flag=True,
    help="Also let the crawl reach loopback, private and link-local addresses.",
)
@click.option(
    "--allow-network",
    multiple=True,
    metavar="CIDR",
    help="Also let the crawl reach this network's addresses (repeatable).",
)
@click.pass_context
def seed_command(
    ctx: click.Context, urls: tuple[str, ...], allow_private: bool, allow_network: tuple[str, ...]
) -> None:
    """Add seed URLs (and their hosts to the scope) to the job's crawl.

    A seed whose address the crawl may not reach (loopback, private, link-local, unless
    allowed) is named on stderr with the reason and not queued; the exit status is then
    1. A seed fetched before and refused then is fetched again once allowed.
    """
    from srcrawl.master.crawl_run import add_seeds
    from srcrawl.slave.fetch_policy import refuse_seed

    cfg = _config(ctx)
    added = add_seeds(
        cfg, urls, allow_private=allow_private, allow_networks=allow_network, refuse=refuse_seed
    )
    for url, reason in added.refused.items():
        click.echo(f"srcrawl: seed {url} refused: {reason}", err=True)
    again = f" ({len(added.again)} fetched again)" if added.again else ""
    click.echo(f"{len(added.queued)} seed(s) queued for job {cfg.job}{again}")
    if added.refused:
        sys.exit(EXIT_SEEDS_REFUSED)


@click.command("pages")
@click.pass_context
def export_pages(ctx: click.Context) -> None:
    """One JSON object per URL the crawl ended: url, status, depth, content_type, title,
    error (why it has no page: a fetch's error, robots_gave_up, …; null for a page),
    body_state."""
    store = _config(ctx).store()
    out = sys.stdout
    for p in store.iter_pages():
        record = {
            "url": p.url,
            "status": p.status,
            "depth": p.depth,
            "content_type": p.content_type,
            "title": p.title,
            "error": p.error,
            "body_state": p.body_state,
        }
        out.write(json.dumps(record, ensure_ascii=False) + "\n")


@click.command("links")
@click.pass_context
def export_links(ctx: click.Context) -> None:
    """`source<TAB>target` per stored link between two stored pages."""
    store = _config(ctx).store()
    out = sys.stdout
    for src, dst in store.iter_link_urls():
        out.write(f"{src}\t{dst}\n")
