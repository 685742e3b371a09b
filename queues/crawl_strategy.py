"""The crawl's strategy document [USTC thesis ch.3 §6.1].

A versioned JSON document in Redis that the master publishes and every
process reads: scope rules, politeness, queue assignment policy. A master
restarted with no options picks the crawl up from it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import asdict, dataclass, fields

import redis

from srcrawl.core.defaults import (
    BODY_STORES,
    DEFAULT_BLOOM_ERROR_RATE,
    DEFAULT_DELAY,
    DEFAULT_DELAY_FACTOR,
    DEFAULT_FETCH_TRIES,
    DEFAULT_HASH_BUCKETS,
    DEFAULT_LAG_AFTER,
    DEFAULT_MAX_CRAWL_DELAY,
    DEFAULT_MAX_DELAY,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_MAX_REDIS_MEMORY,
    DEFAULT_MAX_REPEATED_SEGMENTS,
    DEFAULT_MAX_REVISIT,
    DEFAULT_MAX_URL_LENGTH,
    DEFAULT_MIN_FREE_DISK,
    DEFAULT_MIN_REVISIT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_REVISIT,
    DEFAULT_REVISIT_DEC_RATE,
    DEFAULT_REVISIT_FETCH_VALUE,
    DEFAULT_REVISIT_INC_RATE,
    DEFAULT_REVISIT_POLICIES,
    DEFAULT_ROBOTS_DEFER,
    DEFAULT_ROBOTS_TTL,
    DEFAULT_SITEMAP_EVERY,
    DEFAULT_USER_AGENT,
    DEFAULT_WARC_MAX_BYTES,
    MAX_PARTITIONS,
)
from srcrawl.core.errors import ConfigError
from srcrawl.core.keys import Keys
from srcrawl.core.useragent import check_user_agent
from srcrawl.queues.change_rate import MAX_GROWTH, ChangeHistory, optimal_interval

QUEUE_POLICIES = ("host", "hash")


@dataclass(frozen=True)
class CrawlStrategy:
    """Everything the master decides a crawl by."""

    seed_hosts: tuple[str, ...] = ()
    """host[:port] of the seeds: the default scope."""
    allow_domains: tuple[str, ...] = ()
    """Extra domains in scope (a domain covers its subdomains and every port)."""
    allow: tuple[str, ...] = ()
    """Regexes: when given, a URL must match one of them."""
    deny: tuple[str, ...] = ()
    """Regexes: a URL matching one of them is never crawled."""
    max_depth: int = DEFAULT_MAX_DEPTH
    max_url_length: int = DEFAULT_MAX_URL_LENGTH
    max_repeated_segments: int = DEFAULT_MAX_REPEATED_SEGMENTS
    max_pages_per_host: int = 0
    """0: no cap."""
    delay: float = DEFAULT_DELAY
    delay_factor: float = DEFAULT_DELAY_FACTOR
    max_delay: float = DEFAULT_MAX_DELAY
    max_crawl_delay: float = DEFAULT_MAX_CRAWL_DELAY
    queue_policy: str = "host"
    per_host: int = 1
    """Most requests in flight to one host across the cluster (robots.txt Crawl-delay holds a
    host to 1); above 1 its URLs are spread over QUEUES_PER_LIMIT × this many frontier queues."""
    hash_buckets: int = DEFAULT_HASH_BUCKETS
    partitions: int = 1
    """Ranges of the 64-bit host hash the crawl's frontier is divided into, each with its
    own keys (one Redis Cluster slot each) and its own master lease (queues/partitions.py)."""
    bloom_error_rate: float = DEFAULT_BLOOM_ERROR_RATE
    fetch_timeout: float = DEFAULT_READ_TIMEOUT
    """Seconds a slave waits for a response's bytes before giving the URL up."""
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES
    """Bytes of a body a slave reads; the rest is cut off."""
    robots_defer: float = DEFAULT_ROBOTS_DEFER
    """Seconds a host waits after its robots.txt answered 5xx or not at all."""
    lag_after: float = DEFAULT_LAG_AFTER
    """A host whose robots.txt deferral is this many seconds or longer stops holding the
    depth levels (a *lagging* queue, see master/frontier/); a shorter one holds them."""
    robots_ttl: float = DEFAULT_ROBOTS_TTL
    """Seconds a fetched robots.txt stays cached (the host's sitemaps are read again too
    when it is fetched again)."""
    sitemap_every: float = DEFAULT_SITEMAP_EVERY
    """Seconds between two reads of a host's sitemaps by an always-on crawl: a page whose
    ``<lastmod>`` is newer than its last fetch is due at once."""
    user_agent: str = DEFAULT_USER_AGENT
    """The User-Agent of every request of the crawl; its product token is what
    robots.txt groups are matched against (see srcrawl/core/useragent.py)."""
    allow_private: bool = False
    """Requests may go to any address: loopback, private, link-local, … (see fetch_policy)."""
    allow_networks: tuple[str, ...] = ()
    """CIDRs whose addresses requests may go to, beside the public ones."""
    seed_origins: tuple[str, ...] = ()
    """``scheme://host[:port]`` of the seeds: those on an IP literal or localhost need no opt-in."""
    fetch_tries: int = DEFAULT_FETCH_TRIES
    """Fetches of a URL that keeps failing for a passing reason before it is stored as failed."""
    retry_backoff: float = DEFAULT_RETRY_BACKOFF
    """Seconds before a failed URL's second try; doubled for each try after."""
    body_store: str = "warc"
    """Where slaves keep the bodies: ``warc`` (WARC files, the store points into them) or
    ``sql`` (compressed in the pages table)."""
    warc_max_bytes: int = DEFAULT_WARC_MAX_BYTES
    """Bytes after which a slave starts its next WARC file."""
    sitemaps: bool = True
    """The slave that reads a host's robots.txt reads its sitemaps too (its ``Sitemap:``
    lines, else ``/sitemap.xml``): their pages are seeds, their ``<lastmod>`` kept."""
    revisit: float = DEFAULT_REVISIT
    """Seconds from a page's first fetch to its second (``--revisit``)."""
    min_revisit: float = DEFAULT_MIN_REVISIT
    max_revisit: float = DEFAULT_MAX_REVISIT
    """Bounds of a page's adaptive interval (``--min-revisit``, ``--max-revisit``)."""
    revisit_policy: str = "adaptive"
    """``adaptive`` (each page's estimated change rate, see queues/change_rate.py), ``nutch``
    (Nutch's AdaptiveFetchSchedule) or ``uniform`` (every page at --revisit)."""
    min_free_disk: int = DEFAULT_MIN_FREE_DISK
    """Bytes that must stay free on the WARC and store volumes, or the crawl pauses
    (``--min-free-disk``, master/guards.py)."""
    max_redis_memory: int = DEFAULT_MAX_REDIS_MEMORY
    """Redis ``used_memory`` above which no URL is admitted (0: 90 % of ``maxmemory``)."""
    version: int = 0

    def __post_init__(self) -> None:
        self._check_policy()
        self._check_limits()
        self._check_revisit()
        check_user_agent(self.user_agent)
        self._check_patterns()

    def _check_policy(self) -> None:
        if self.queue_policy not in QUEUE_POLICIES:
            raise ConfigError(f"--queue-policy must be one of {', '.join(QUEUE_POLICIES)}")
        if self.hash_buckets < 1:
            raise ConfigError("hash buckets must be at least 1")
        if self.per_host < 1:
            raise ConfigError("--per-host must be at least 1")
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise ConfigError(f"--partitions must be between 1 and {MAX_PARTITIONS}")
        if self.per_host > 1 and self.queue_policy != "host":
            raise ConfigError(
                "--per-host is a limit of the host queue policy: "
                "--queue-policy hash has no per-host limit"
            )
        if not 0 < self.bloom_error_rate < 1:
            raise ConfigError("the Bloom error rate must be between 0 and 1")

    def _check_limits(self) -> None:
        if self.max_depth < 0:
            raise ConfigError("--depth must be 0 or more")
        if min(self.delay, self.delay_factor, self.max_delay, self.max_crawl_delay) < 0:
            raise ConfigError("delays must not be negative")
        if self.max_delay < self.delay:
            raise ConfigError("--max-delay must not be below --delay")
        if (
            min(
                self.fetch_timeout,
                self.robots_defer,
                self.robots_ttl,
                self.sitemap_every,
                self.lag_after,
            )
            <= 0
            or self.max_page_bytes < 1
        ):
            raise ConfigError(
                "--fetch-timeout, --robots-defer, --lag-after, --robots-ttl, --sitemap-every "
                "and --max-page-bytes must be positive"
            )
        if self.body_store not in BODY_STORES or self.warc_max_bytes < 1:
            raise ConfigError(
                f"--body-store must be one of {', '.join(BODY_STORES)}, --warc-max-bytes positive"
            )
        if self.min_free_disk < 0 or self.max_redis_memory < 0:
            raise ConfigError("--min-free-disk and --max-redis-memory must not be negative")
        if self.fetch_tries < 1 or self.retry_backoff < 0:
            raise ConfigError("--fetch-tries must be at least 1, --retry-backoff not negative")

    def _check_revisit(self) -> None:
        if self.revisit_policy not in DEFAULT_REVISIT_POLICIES:
            raise ConfigError(
                f"--revisit-policy must be one of {', '.join(DEFAULT_REVISIT_POLICIES)}"
            )
        if not 0 < self.min_revisit <= self.max_revisit:
            raise ConfigError("--min-revisit must be positive and not above --max-revisit")
        if self.revisit <= 0:
            raise ConfigError("--revisit must be positive")

    def next_revisit(self, interval: float, changed: bool | None) -> float:
        """Seconds until a page is fetched again under the ``nutch`` or ``uniform`` policy,
        after a fetch with its current ``interval`` (0: its first fetch) found it
        ``changed`` (True), the same (False) or gone (None: retried at the longest interval).

        Nutch's AdaptiveFetchSchedule: a changed page comes back sooner (× (1 -
        dec_rate)), an unchanged one later (× (1 + inc_rate)), within
        [--min-revisit, --max-revisit]; the first interval is --revisit. The
        uniform policy keeps every page at --revisit.
        """
        if self.revisit_policy == "uniform":
            return self.revisit
        if changed is None:
            return self.clamp_revisit(self.max_revisit)
        if interval <= 0:
            wait = self.revisit
        elif changed:
            wait = interval * (1 - DEFAULT_REVISIT_DEC_RATE)
        else:
            wait = interval * (1 + DEFAULT_REVISIT_INC_RATE)
        return self.clamp_revisit(wait)

    def plan_revisit(
        self, interval: float, changed: bool | None, history: ChangeHistory | None, now: float
    ) -> tuple[float, ChangeHistory | None]:
        """The next interval and change record of a page fetched at ``now`` (see
        :meth:`next_revisit` for the arguments); ``history`` is None before its first
        recrawl. Only the ``adaptive`` policy keeps a record (queues/change_rate.py): a page
        first waits --revisit, then the interval its estimated change rate earns when a
        fetch is worth DEFAULT_REVISIT_FETCH_VALUE × --revisit seconds of freshness,
        growing at most MAX_GROWTH × per visit."""
        if self.revisit_policy != "adaptive":
            return self.next_revisit(interval, changed), None
        if changed is None:
            return self.clamp_revisit(self.max_revisit), None  # gone: its record goes too
        if interval <= 0 or history is None:
            return self.revisit, ChangeHistory(at=now)
        seen = history.observe(changed, now)
        wait = optimal_interval(seen.rate(), DEFAULT_REVISIT_FETCH_VALUE * self.revisit)
        return self.clamp_revisit(min(wait, interval * MAX_GROWTH)), seen

    def clamp_revisit(self, seconds: float) -> float:
        """``seconds`` within [--min-revisit, --max-revisit], widened to hold --revisit
        (``--revisit 2s`` alone needs no ``--min-revisit``)."""
        low, high = min(self.min_revisit, self.revisit), max(self.max_revisit, self.revisit)
        return min(max(seconds, low), high)

    def _check_patterns(self) -> None:
        for cidr in self.allow_networks:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as e:
                raise ConfigError(f"--allow-network {cidr!r} is no network (CIDR): {e}") from e
        for pattern in (*self.allow, *self.deny):
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"bad regex {pattern!r}: {e}") from e

    def host_limit(self, crawl_delay: float | None) -> int:
        """Requests in flight a host spread over several queues may have once its robots.txt
        is read: --per-host, or 1 with a Crawl-delay. The master hands out tasks by it, the
        slaves take host slots by it (slave/host_slots.py)."""
        return 1 if crawl_delay else self.per_host

    def politeness_ms(self, fetch_ms: float, crawl_delay: float | None) -> int:
        """Wait after a request: clamp(factor × fetch time, delay, max_delay), ≥ Crawl-delay."""
        wait = min(max(self.delay_factor * fetch_ms / 1000.0, self.delay), self.max_delay)
        if crawl_delay:
            wait = max(wait, min(crawl_delay, self.max_crawl_delay))
        return int(wait * 1000)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> CrawlStrategy:
        data = json.loads(raw)
        known = {f.name for f in fields(cls)}
        data = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in known}
        return cls(**data)


def spread_host(queue: str) -> str | None:
    """The host of a frontier queue that is one of several of its host (``host#k``, see
    --per-host), else None."""
    host, sep, k = queue.rpartition("#")
    return host if sep and k.isdigit() else None


def publish(client: redis.Redis, keys: Keys, strategy: CrawlStrategy) -> CrawlStrategy:
    """Store ``strategy`` as the next version; return it with its version."""
    current = load(client, keys)
    version = (current.version if current else 0) + 1
    published = CrawlStrategy(**{**asdict(strategy), "version": version})
    client.set(keys.crawl_strategy, published.to_json())
    return published


def load(client: redis.Redis, keys: Keys) -> CrawlStrategy | None:
    raw = client.get(keys.crawl_strategy)
    return CrawlStrategy.from_json(raw) if raw else None
