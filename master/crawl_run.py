"""Starting a crawl, adding seeds to it, and what it has done so far.

Running it on one machine is :func:`srcrawl.app.runner.run_local_crawl`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from srcrawl.core.defaults import DEFAULT_RECRAWL_HOST_LIMIT
from srcrawl.core.errors import ConfigError, StoreError
from srcrawl.core.urls import InvalidURL, canonicalize, fingerprint, host_of, origin
from srcrawl.master.crawl_master import reset_crawl
from srcrawl.master.frontier import now_ms
from srcrawl.queues import crawl_strategy as strategies
from srcrawl.queues.crawl_protocol import seed_message
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.partitions import partition_keys, partition_of_url
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.workers import workers
from srcrawl.settings.config import Config

log = logging.getLogger("srcrawl.seed")


def check_seeds(seeds: Sequence[str]) -> list[str]:
    """Canonical seeds; a ConfigError naming the first one that is not a crawlable URL."""
    out = []
    for seed in seeds:
        try:
            out.append(canonicalize(seed))
        except InvalidURL as e:
            raise ConfigError(f"invalid seed {seed!r}: {_seed_hint(seed) or e}") from e
    if not out:
        raise ConfigError("give at least one seed URL")
    return out


def _seed_hint(seed: str) -> str | None:
    """What a seed typed without its scheme (``127.0.0.1:8000/``, ``example.org``) meant."""
    if "://" in seed:
        return None
    try:
        meant = canonicalize(f"http://{seed}")
    except InvalidURL:
        return None
    return f"it has no scheme (did you mean {meant!r}?)"


def _with_seeds(strategy: CrawlStrategy, canonical: Sequence[str]) -> CrawlStrategy:
    """``strategy`` with the hosts and origins of the ``canonical`` seeds added."""
    hosts = tuple(dict.fromkeys([*strategy.seed_hosts, *(host_of(u) for u in canonical)]))
    origins = tuple(dict.fromkeys([*strategy.seed_origins, *(origin(u) for u in canonical)]))
    return replace(strategy, seed_hosts=hosts, seed_origins=origins)


def start_crawl(cfg: Config, seeds: Sequence[str], strategy: CrawlStrategy) -> CrawlStrategy:
    """Forget any previous crawl of the job, publish ``strategy`` and queue the seeds."""
    canonical = check_seeds(seeds)
    reset_crawl(cfg)
    client = cfg.redis()
    published = strategies.publish(client, cfg.keys, _with_seeds(strategy, canonical))
    client.hset(
        cfg.keys.crawl_state, mapping={"state": "running", "started": time.time(), "level": 0}
    )
    _push_seeds(cfg, canonical, published)
    return published


def _push_seeds(
    cfg: Config, canonical: Sequence[str], strategy: CrawlStrategy, again: Sequence[str] = ()
) -> None:
    """Queue the seeds, each for the partition that owns its host (``again``: seeds fetched
    even if seen, see :class:`~srcrawl.queues.crawl_protocol.Seed`)."""
    client = cfg.redis()
    by_partition: dict[int, tuple[list[str], list[str]]] = {}
    for url in canonical:
        new, old = by_partition.setdefault(partition_of_url(url, strategy.partitions), ([], []))
        (old if url in again else new).append(url)
    for p, (new, old) in by_partition.items():
        keys = cfg.keys.partition(p, strategy.partitions)
        message = seed_message(new, strategy.version, old)
        PhaseQueues(client, keys, "crawl").nrq.push([message])


@dataclass
class SeedsAdded:
    """What :func:`add_seeds` did with the seeds it was given."""

    queued: list[str] = field(default_factory=list)
    """Canonical seeds queued for the crawl."""
    again: list[str] = field(default_factory=list)
    """Of those, URLs stored as failed (refused, timed out, given up, …): fetched again."""
    refused: dict[str, str] = field(default_factory=dict)
    """Canonical seed -> why the address policy refuses it (not queued)."""
    strategy: CrawlStrategy | None = None
    """The strategy published with the seeds (None: none was queued)."""


SeedJudge = Callable[[CrawlStrategy, str], str | None]
"""Why a crawl of a strategy may not fetch a seed (its address is refused), else None."""


def add_seeds(
    cfg: Config,
    seeds: Sequence[str],
    *,
    allow_private: bool = False,
    allow_networks: Sequence[str] = (),
    refuse: SeedJudge | None = None,
) -> SeedsAdded:
    """Add seeds (and their hosts to the scope) to the job's crawl, running or not.

    A job with no crawl yet gets one with the default strategy: that is how a
    master started with ``--keep-running`` (docker compose) is given work.
    ``allow_private`` and ``allow_networks`` widen the addresses the crawl may reach.
    A seed ``refuse`` refuses (the command line passes the fetch's own address check,
    ``FetchPolicy.refuse_seed``) is not queued, and named in the result; a seed whose
    stored fetch failed before (or was given up) is fetched again although seen.
    """
    canonical = check_seeds(seeds)
    client = cfg.redis()
    current = strategies.load(client, cfg.keys) or CrawlStrategy()
    networks = tuple(dict.fromkeys([*current.allow_networks, *allow_networks]))
    current = replace(
        current, allow_private=current.allow_private or allow_private, allow_networks=networks
    )
    widened = _with_seeds(current, canonical)
    out = SeedsAdded()
    for url in canonical:
        reason = None if refuse is None else refuse(widened, url)
        if reason is None:
            out.queued.append(url)
        else:
            out.refused[url] = reason
    if not out.queued:
        return out
    out.strategy = strategies.publish(client, cfg.keys, _with_seeds(current, out.queued))
    client.hset(cfg.keys.crawl_state, "state", "running")
    if out.strategy.partitions > 1:  # every partition takes up the crawl again
        for k in cfg.keys.partitions(out.strategy.partitions):
            client.hdel(k.crawl_state, "state")
    out.again = _failed_before(cfg, out.queued)
    _push_seeds(cfg, out.queued, out.strategy, out.again)
    return out


def recrawl_host(cfg: Config, host: str, limit: int = DEFAULT_RECRAWL_HOST_LIMIT) -> int:
    """Fetch the stored pages of ``host`` (``host[:port]``) again, at once, each at its
    stored depth: given to the crawl as seeds fetched although seen (see
    :attr:`Seed.again`), so the master checks them against the scope and the host's
    politeness like any seed. Returns how many."""
    pages = cfg.store().urls_of_host(host, limit)
    if not pages:
        return 0
    client = cfg.redis()
    strategy = strategies.load(client, cfg.keys)
    if strategy is None:
        raise ConfigError(f"job {cfg.job!r} has no crawl: start one first")
    client.hset(cfg.keys.crawl_state, "state", "running")
    if strategy.partitions > 1:  # the host's partition takes up the crawl again
        for k in cfg.keys.partitions(strategy.partitions):
            client.hdel(k.crawl_state, "state")
    keys = cfg.keys.partition(
        partition_of_url(pages[0][0], strategy.partitions), strategy.partitions
    )
    urls, depths = [u for u, _d in pages], [d for _u, d in pages]
    message = seed_message([], strategy.version, urls, depths)
    PhaseQueues(client, keys, "crawl").nrq.push([message])
    return len(pages)


def _failed_before(cfg: Config, canonical: Sequence[str]) -> list[str]:
    """The URLs among ``canonical`` stored as failed: a fetch with an error (the address
    policy refused it, it timed out, …) or given up (its host's robots.txt never answered).
    """
    by_fp = {fingerprint(u): u for u in canonical}
    try:
        pages = cfg.store().get_pages(list(by_fp))
    except StoreError as e:  # the seeds still go; only a failed one stays unfetched
        log.warning("cannot tell whether a seed failed before (%s)", e)
        return []
    return [by_fp[p.fp] for p in pages if p.error]


def progress(cfg: Config) -> dict[str, int]:
    """Counters of the job's crawl, plus what is queued and in flight (O(partitions)
    round trips)."""
    client = cfg.redis()
    c: dict[str, int] = {}
    inflight = 0
    for k in partition_keys(client, cfg.keys):
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(k.stats("crawl"))
        pipe.hlen(k.crawl_inflight)
        raw, n = pipe.execute()
        inflight += int(n)
        for name, v in raw.items():
            c[name.decode()] = c.get(name.decode(), 0) + int(v)
    finished = sum(
        c.get(k, 0)
        for k in ("pages", "refetched", "robots_disallowed", "robots_gave_up", "slave_errors")
    )
    c["in_flight"] = inflight
    # a URL found nearer is fetched again only when its deeper task was fetched already
    tasks = c.get("scheduled", 0) + c.get("depth_refetch", 0)
    c["queued"] = max(0, tasks - finished - c["in_flight"])
    return c


def host_errors(cfg: Config) -> dict[str, dict]:
    """host -> why its robots.txt could not be had, for the hosts that are still failing."""
    client = cfg.redis()
    out: dict[str, dict] = {}
    for k in partition_keys(client, cfg.keys):
        raw = client.hgetall(k.crawl_host_errors)
        out.update({h.decode(): json.loads(v) for h, v in raw.items()})
    return out


def describe_host_error(host: str, record: dict) -> str:
    """One sentence, as ``127.0.0.1:8000: robots.txt: HTTP 503; retrying in 60 s (try 1 of 5)``."""
    head = f"{host}: {record.get('what', 'robots.txt')}: {record.get('reason', 'failed')}"
    retry_at = record.get("retry_at")
    if retry_at is None:
        return f"{head}; gave up after {record.get('try')} tries"
    wait = max(0.0, float(retry_at) - time.time())
    return f"{head}; retrying in {wait:.0f} s (try {record.get('try')} of {record.get('tries')})"


POLITENESS = "politeness"
BACKING_OFF = "backing off"


def waiting_on(cfg: Config) -> str | None:
    """What the crawl waits on right now, if it waits: BACKING_OFF or POLITENESS.

    It waits when no host queue is due and the live slaves' fetch slots are mostly idle;
    on BACKING_OFF when URLs or queues back off after failures (a retry's wait), else on
    POLITENESS when queues wait for their politeness timer.
    """
    client = cfg.redis()
    now = now_ms()
    due = waiting = inflight = backoff = 0
    for k in partition_keys(client, cfg.keys):
        pipe = client.pipeline(transaction=False)
        pipe.zcount(k.crawl_ready, "-inf", now)
        pipe.zcount(k.crawl_ready, f"({now}", "+inf")
        pipe.hlen(k.crawl_inflight)
        pipe.zcard(k.crawl_backoff)
        pipe.zcount(k.crawl_backoff_queues, f"({now}", "+inf")
        d, w, f, b, q = pipe.execute()
        due, waiting, inflight, backoff = due + d, waiting + w, inflight + f, backoff + b + q
    if due or not (waiting or backoff):
        return None
    live = [w for w in workers(client, cfg.keys) if w.alive]
    threads = sum(int(w.stats.get("crawl_threads", 0)) for w in live)
    if inflight >= threads / 2:
        return None
    return BACKING_OFF if backoff else POLITENESS
