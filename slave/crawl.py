"""The crawl phase on a slave: one fetch task in, one outcome out [seed 002 §3.1].

srq task → robots (cluster-wide cache) → fetch → decode → parse → page and
links queued for the store → nrq outcome with the page's links, repeats
dropped by a local CLOCK cache [seed 004]; the runtime stores the queued
pages in one transaction (:meth:`CrawlHandler.flush`) before it
acknowledges their tasks.
"""

from __future__ import annotations

import threading
import time

from srcrawl.config import Config
from srcrawl.defaults import DEFAULT_FETCH_THREADS, DEFAULT_LINK_CACHE
from srcrawl.errors import EnvelopeError
from srcrawl.master.strategy import CrawlStrategy
from srcrawl.master.strategy import load as load_strategy
from srcrawl.queues.envelope import decode, encode
from srcrawl.slave.clock_cache import ClockCache
from srcrawl.slave.decode import decode_html, is_html, utf8_source
from srcrawl.slave.fetch import Fetcher
from srcrawl.slave.page_writer import PageWriter
from srcrawl.slave.parse import parse_html
from srcrawl.slave.robots import RobotsCache
from srcrawl.sql.store import Page, compress_body
from srcrawl.urls import InvalidURL, canonicalize, fingerprint, host_of, origin

_STRATEGY_REFRESH = 5.0


class CrawlHandler:
    """Serves the crawl phase; ``threads`` tasks are fetched at once."""

    phase = "crawl"
    batch_size = 1

    def __init__(
        self, cfg: Config, *, threads: int = DEFAULT_FETCH_THREADS, parser: str = "lxml"
    ) -> None:
        self.cfg = cfg
        self.threads = threads
        self.parser = parser
        self._version = -1
        self._checked = 0.0
        self._tools: tuple[Fetcher, RobotsCache] | None = None
        self.cache = ClockCache(DEFAULT_LINK_CACHE)
        self.writer = PageWriter(cfg.store())
        self._lock = threading.Lock()
        self.pages = 0
        self.errors = 0
        self.invalid_links = 0

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        return [self._one(raw) for raw in tasks]

    def tools(self) -> tuple[Fetcher, RobotsCache]:
        """Fetcher and robots cache set up by the crawl's strategy document.

        The document is read again every few seconds and the tools rebuilt
        when its version changed, so `srcrawl crawl --fetch-timeout …` reaches
        slaves that were started long before.
        """
        now = time.monotonic()
        if self._tools is not None and now - self._checked < _STRATEGY_REFRESH:
            return self._tools
        with self._lock:
            if self._tools is None or now - self._checked >= _STRATEGY_REFRESH:
                self._checked = now
                strategy = load_strategy(self.cfg.redis(), self.cfg.keys) or CrawlStrategy()
                if self._tools is None or strategy.version != self._version:
                    fetcher = Fetcher(read_timeout=strategy.fetch_timeout,
                                      max_bytes=strategy.max_page_bytes,
                                      threads=self.threads)  # fmt: skip
                    robots = RobotsCache(self.cfg.redis(), self.cfg.keys, fetcher,
                                         defer=strategy.robots_defer)  # fmt: skip
                    self._tools = (fetcher, robots)
                    self._version = strategy.version
        return self._tools

    def _one(self, raw: bytes) -> bytes:
        try:
            task = decode(raw)
            url, fp, depth, queue = (
                task.get("url"),
                int(task.get("fp")),
                int(task.get("depth")),
                task.get("q"),
            )
        except (EnvelopeError, TypeError, ValueError):
            return encode("error", {"phase": "crawl", "error": "malformed fetch task"}, raw)
        base = {"url": url, "fp": fp, "depth": depth, "q": queue}
        fetcher, robots = self.tools()
        site = origin(url)
        rules = robots.lookup(site)
        if rules is None:
            # fetching robots.txt is this task's request to the host; the URL
            # itself waits its politeness turn
            rules, result = robots.fetch_and_store(site)
            if rules.deferred_until is None:
                fields = {"task": raw.decode(), "fetch_ms": result.elapsed_ms,
                          "crawl_delay": rules.crawl_delay}  # fmt: skip
                return encode("robots", {**base, **fields})
        if rules.deferred_until is not None:
            return encode("deferred", {**base, "task": raw.decode(), "until": rules.deferred_until})
        if not rules.allowed(url):
            return encode("disallowed", base)

        result = fetcher.fetch(url)
        title = text = ""
        links: list[str] = []
        if result.redirect:
            links = [result.redirect]
        elif result.status and is_html(result.content_type, result.body):
            html, encoding = decode_html(result.body, result.content_type)
            utf8 = utf8_source(result.body, html, encoding)
            parsed = parse_html(html, url, self.parser, utf8=utf8)
            title = parsed.title
            text = "" if parsed.noindex else parsed.text
            links = [] if parsed.nofollow else parsed.links
        canonical: dict[str, int] = {}
        invalid = 0
        for link in links:
            try:
                c = canonicalize(link)
            except InvalidURL:
                invalid += 1
                continue
            if c not in canonical:
                canonical[c] = fingerprint(c)
        page = Page(
            fp=fp, url=url, host=host_of(url), depth=depth, status=result.status,
            content_type=result.content_type, fetched_at=time.time(),
            fetch_ms=int(result.elapsed_ms), title=title, text=text,
            body=compress_body(result.body) if result.body else None,
        )  # fmt: skip
        # stored by flush(), before the runtime acknowledges this task
        self.writer.add([page], [(fp, dst) for dst in canonical.values()])
        with self._lock:
            emit = [c for c, f in canonical.items() if not self.cache.seen_or_add(f)]
            self.pages += 1
            self.errors += result.error is not None
            self.invalid_links += invalid
        return encode("fetched", {
            **base, "status": result.status, "fetch_ms": result.elapsed_ms,
            "crawl_delay": rules.crawl_delay, "links": emit, "error": result.error,
            "invalid": invalid,
        })  # fmt: skip

    def flush(self) -> None:
        """Store the pages of every task handled so far (the runtime calls it before an ack)."""
        self.writer.flush()

    def stats(self) -> dict[str, float]:
        return {
            "threads": self.threads,
            "pages": self.pages,
            "errors": self.errors,
            "invalid_links": self.invalid_links,
            "cache_hit_rate": round(self.cache.hit_rate, 4),
            "stored_bare": self.writer.stored_bare,
            "store_dropped": self.writer.dropped,
        }
