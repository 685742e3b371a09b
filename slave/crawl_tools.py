"""The crawl's tools on a slave, as the job's strategy document sets them up.

The fetcher, the robots.txt cache and the sitemap fetcher take their
timeouts, caps, user agent and address policy from the crawl's strategy
(queues/crawl_strategy.py). The document is read again every few seconds and
the tools rebuilt when its version changed, so `srcrawl crawl --fetch-timeout
…` reaches slaves that were started long before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from srcrawl.core.defaults import DEFAULT_FETCH_TRIES
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.crawl_strategy import load as load_strategy
from srcrawl.slave.fetch import Fetcher
from srcrawl.slave.fetch_policy import FetchPolicy
from srcrawl.slave.robots import RobotsCache
from srcrawl.slave.sitemaps import SitemapLimits

if TYPE_CHECKING:
    import redis

    from srcrawl.core.keys import Keys

STRATEGY_REFRESH = 5.0
"""Seconds between two reads of the strategy document."""


class CrawlTools:
    """Fetcher, robots cache and sitemap fetcher of the crawl's current strategy.

    ``on_new`` is called with each new strategy once its tools are built,
    under the tools' lock (the handler switches its body store then).
    """

    def __init__(
        self, client: redis.Redis, keys: Keys, on_new: Callable[[CrawlStrategy], None]
    ) -> None:
        self.client = client
        self.keys = keys
        self._on_new = on_new
        self._version = -1
        self._checked = 0.0
        self._tools: tuple[Fetcher, RobotsCache] | None = None
        self._lock = threading.Lock()
        self.strategy = CrawlStrategy()
        self.sitemap_fetcher: Fetcher | None = None
        """Reads a sitemap up to its own cap (one byte more tells a cut one)."""
        self.tries = DEFAULT_FETCH_TRIES
        self.user_agent = ""

    def get(self, version: int = 0) -> tuple[Fetcher, RobotsCache]:
        """Fetcher and robots cache of the strategy, read again when it is due; at once
        for a task that needs at least ``version`` (a seed given again once the crawl
        may reach it)."""
        now = time.monotonic()
        stale = version > self._version
        if self._tools is not None and not stale and now - self._checked < STRATEGY_REFRESH:
            return self._tools
        with self._lock:
            if self._tools is None or stale or now - self._checked >= STRATEGY_REFRESH:
                self._checked = now
                strategy = load_strategy(self.client, self.keys) or CrawlStrategy()
                if self._tools is None or strategy.version != self._version:
                    self._build(strategy)
        assert self._tools is not None  # built above, or before
        return self._tools

    def _build(self, strategy: CrawlStrategy) -> None:
        fetcher = Fetcher(
            read_timeout=strategy.fetch_timeout,
            max_bytes=strategy.max_page_bytes,
            user_agent=strategy.user_agent,
            policy=FetchPolicy.of(strategy),
        )
        robots = RobotsCache(
            self.client,
            self.keys,
            fetcher,
            strategy.robots_ttl,
            defer=strategy.robots_defer,
            user_agent=strategy.user_agent,
        )
        self._tools = (fetcher, robots)
        self.strategy = strategy
        self.sitemap_fetcher = Fetcher(
            read_timeout=strategy.fetch_timeout,
            max_bytes=SitemapLimits().max_bytes + 1,
            user_agent=strategy.user_agent,
            policy=fetcher.policy,
        )
        self._version = strategy.version
        self.tries = strategy.fetch_tries
        self.user_agent = strategy.user_agent
        self._on_new(strategy)
