"""The crawl phase on a slave: one fetch task in, one outcome out.

srq task → robots (cluster-wide cache) → fetch → decode → parse → page and
links queued for the store → nrq outcome with the page's links, canonical and
fingerprinted here once (the master judges them as they are), repeats dropped
by a local CLOCK cache (queues/link_cache.py); the runtime stores the queued
pages in one transaction (:meth:`CrawlHandler.flush`) before it acknowledges
their tasks. The messages are those of queues/crawl_protocol.py.

The parts live beside this module: the tools of the crawl's strategy
(slave/crawl_tools.py), the outcomes of robots.txt and sitemap requests
(slave/robots_outcome.py), what a finished fetch becomes
(slave/page_outcome.py), the links sent (slave/links.py) and the work done
beside the driver thread (slave/side_work.py).
"""

from __future__ import annotations

import logging
import select
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from srcrawl.core.defaults import (
    DEFAULT_FETCH_THREADS,
    DEFAULT_PARSE_INLINE_BYTES,
    HOST_SLOT_MARGIN,
)
from srcrawl.core.errors import EnvelopeError
from srcrawl.core.telemetry import Cumulative, Telemetry
from srcrawl.core.urls import origin
from srcrawl.queues.crawl_protocol import (
    Deferred,
    Disallowed,
    FetchTask,
    task_error,
    work_left,
)
from srcrawl.queues.crawl_strategy import CrawlStrategy, spread_host
from srcrawl.slave.crawl_tools import CrawlTools
from srcrawl.slave.fetch import Fetcher, FetchMulti, FetchResult
from srcrawl.slave.host_slots import HostSlots
from srcrawl.slave.links import LinkEmitter
from srcrawl.slave.page_outcome import PageOutcomes
from srcrawl.slave.page_writer import PageWriter
from srcrawl.slave.revisit import conditional_headers
from srcrawl.slave.robots import RobotsCache, RobotsRules, robots_url
from srcrawl.slave.robots_outcome import HostSitemaps, RobotsMiss, SitemapsOnly, robots_outcome
from srcrawl.slave.side_work import SideWork
from srcrawl.warc.output import WarcOutput
from srcrawl.warc.storage import LocalWarcStorage, WarcStorage

if TYPE_CHECKING:
    import redis

    from srcrawl.core.keys import Keys
    from srcrawl.settings.config import Config

log = logging.getLogger("srcrawl.slave")

_Page = tuple[bytes, FetchTask, RobotsRules, FetchResult]
"""A fetched page waiting for its outcome: the raw task, the task, its host's rules, the fetch."""


def warc_output(root: Path | WarcStorage, job: str) -> Callable[[int], WarcOutput]:
    """The job's WARC output in ``root`` (a directory, or a storage such as an object
    store's; files of at most the given bytes), made on demand."""
    storage = LocalWarcStorage(root) if isinstance(root, Path) else root
    return lambda max_bytes: WarcOutput(storage, job, max_bytes)


class CrawlHandler:
    """Serves the crawl phase; ``threads`` tasks are fetched at once.

    The runtime drives it through :meth:`start` and :meth:`poll` from one
    thread, which runs every fetch at once on a libcurl multi handle: no
    fetch threads, no hand-offs between them. A page that arrives is decoded
    and parsed there when it is small (DEFAULT_PARSE_INLINE_BYTES: a few ms at
    most), else by a small pool of parse threads beside it, so a page that
    takes seconds to parse holds up no fetch (libxml2 parses without the GIL;
    the pure Python fallback hands it over every few milliseconds).
    :meth:`handle` does the same work one task at a time.
    """

    phase = "crawl"
    batch_size = 1

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        writer: PageWriter,
        warc: Callable[[int], WarcOutput],
        *,
        threads: int = DEFAULT_FETCH_THREADS,
        parser: str = "lxml",
    ) -> None:
        """``client`` and ``keys``: the job's Redis (strategy, robots.txt cache, the
        crawl's state); ``writer``: where pages go; ``warc``: the WARC output to make
        when the strategy keeps bodies in WARC files (see :func:`warc_output`)."""
        self.client = client
        self.keys = keys
        self.threads = threads
        self.writer = writer
        self._warc = warc
        self._tools = CrawlTools(client, keys, self._use_warc)
        self._closing = threading.Event()
        self.links = LinkEmitter()
        self.outcomes = PageOutcomes(self._tools, writer, self.links, parser)
        self.sitemaps = HostSitemaps(self._tools, self._closing)
        self._multi: FetchMulti | None = None
        self._side = SideWork()
        self._slots = HostSlots(
            client,
            keys,
            lambda fetch_ms, crawl_delay: self.strategy.politeness_ms(fetch_ms, crawl_delay),
            lambda: self.tools()[0].deadline + HOST_SLOT_MARGIN,
        )
        self._telemetry = Telemetry()
        self._warc_totals = Cumulative()

    @classmethod
    def from_config(
        cls, cfg: Config, *, threads: int = DEFAULT_FETCH_THREADS, parser: str = "lxml"
    ) -> CrawlHandler:
        """The handler of the configured Redis, store and WARC directory."""
        return cls(
            cfg.redis(),
            cfg.keys,
            PageWriter(cfg.store()),
            warc_output(cfg.warc_storage(), cfg.job),
            threads=threads,
            parser=parser,
        )

    @property
    def strategy(self) -> CrawlStrategy:
        """The crawl's strategy as last read."""
        return self._tools.strategy

    def metrics(self) -> Telemetry:
        """What this handler counted for ``/metrics`` (the runtime flushes it at each
        heartbeat), its WARC writer's bytes and files included."""
        warc = self.writer.warc
        if warc is not None:
            self._telemetry.add("warc_bytes", self._warc_totals.delta("bytes", warc.bytes))
            self._telemetry.add("warc_files", self._warc_totals.delta("files", warc.files))
        return self._telemetry

    def _count(self, result: FetchResult) -> None:
        self._telemetry.fetched(
            result.status, len(result.body), result.elapsed_ms / 1000, result.error
        )

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        return [self._one(raw) for raw in tasks]

    def tools(self, version: int = 0) -> tuple[Fetcher, RobotsCache]:
        """Fetcher and robots cache set up by the crawl's strategy document (see
        :meth:`CrawlTools.get`)."""
        return self._tools.get(version)

    def _use_warc(self, strategy: CrawlStrategy) -> None:
        """Keep bodies in WARC files or in the store, as the strategy says."""
        on, max_bytes = strategy.body_store == "warc", strategy.warc_max_bytes
        self.writer.use_warc(on, lambda: self._warc(max_bytes))
        if self.writer.warc is not None:
            self.writer.warc.max_bytes = max_bytes

    # -- one task at a time (tests) -------------------------------------------
    def _one(self, raw: bytes) -> bytes:
        step = self._begin(raw)
        if isinstance(step, bytes):
            return step
        fetcher, robots = self.tools()
        if isinstance(step, RobotsMiss):
            rules, result = robots.fetch_and_store(step.site)
            return robots_outcome(step.task, rules, result, self.sitemaps.read(rules, result))
        if isinstance(step, SitemapsOnly):
            return self.sitemaps.only(step)
        task, rules = step
        result = fetcher.fetch(task.url, conditional_headers(task))
        self._count(result)
        return self.outcomes.retry(task, rules, result) or self.outcomes.finish(task, rules, result)

    # -- many at once, driven by the runtime's one crawl thread ----------------
    def start(self, raw: bytes) -> bytes | None:
        """Begin ``raw``: its outcome if it needs no fetch, else None (``poll`` returns it).

        Its fetch joins the multi handle: the page's, or on a host whose
        robots.txt is not cached yet, the robots.txt's (this task's request
        to the host; the page waits its politeness turn). A host spread over
        several queues has its page and sitemap requests start only with one
        of its slots (slave/host_slots.py).
        """
        step = self._begin(raw)
        if isinstance(step, bytes):
            return step
        fetcher, _robots = self.tools()
        if self._multi is None:
            self._multi = FetchMulti(fetcher.host_pools)
        multi = self._multi
        if isinstance(step, RobotsMiss):
            multi.add(fetcher, robots_url(step.site), (raw, step, 0))
            return None
        if isinstance(step, SitemapsOnly):
            task, rules = step.task, step.rules

            def go() -> None:
                self._side.sitemaps(raw, self.sitemaps.only, step)
        else:
            task, rules = step

            def go() -> None:
                multi.add(fetcher, task.url, (raw, task, rules), conditional_headers(task))

        host = spread_host(task.queue)
        if host is None:
            go()  # the master holds a host of one queue to one request itself
            return None
        limit = self.strategy.host_limit(rules.crawl_delay)
        self._slots.want(raw, host, limit, rules.crawl_delay, go)
        return None

    def poll(self, timeout: float, wake_fd: int) -> list[tuple[bytes, bytes]]:
        """Wait up to ``timeout`` s for fetches and parses (or ``wake_fd``); the finished tasks."""
        if self._multi is None:
            if timeout > 0:
                select.select([wake_fd], [], [], timeout)
            return []
        out: list[tuple[bytes, bytes]] = []
        pages: list[_Page] = []
        slots = self._slots
        if slots.due():
            slots.run()
        fds = [fd for fd in (wake_fd, self._side.fileno()) if fd >= 0]
        self._collect(self._multi.wait(slots.wait_s(timeout), fds), out, pages)
        self._parse(pages, out)
        self._side.collect(out)
        for raw, _outcome in out:  # a host's sitemaps read: their slot is free
            slots.done(raw, 0.0)
        return out

    def _collect(self, finished: list, out: list[tuple[bytes, bytes]], pages: list[_Page]) -> None:
        """Sort the fetches that ended: outcomes at once to ``out``, pages to parse to
        ``pages``. Their host slots go to the tasks waiting for one at once, and those
        requests leave before any page is parsed."""
        slots = self._slots
        while finished:
            for (raw, what, extra), result in finished:
                if isinstance(what, RobotsMiss):
                    outcome = self._robots_fetched(raw, what, extra, result)
                    if outcome is not None:
                        out.append((raw, outcome))
                    continue
                slots.done(raw, result.elapsed_ms)
                self._count(result)
                retry = self.outcomes.retry(what, extra, result)
                if retry is not None:
                    out.append((raw, retry))
                else:
                    pages.append((raw, what, extra, result))
            finished = []
            if slots.due():
                slots.run()
                assert self._multi is not None  # the fetches came from it
                finished = self._multi.tick()

    def _robots_fetched(
        self, raw: bytes, miss: RobotsMiss, redirects: int, result: FetchResult
    ) -> bytes | None:
        """A robots.txt request finished: the task's outcome, or None when it goes on (a
        redirect followed, or the host's sitemaps read beside: the outcome comes later).

        While the sitemaps are read the task holds its host (the master sends none
        of its other URLs before this outcome), so their requests keep its politeness.
        """
        fetcher, robots = self.tools()
        if result.redirect is not None and redirects < robots.max_redirects:
            assert self._multi is not None  # the request came from it
            self._multi.add(fetcher, result.redirect, (raw, miss, redirects + 1))
            return None
        rules = robots.store(miss.site, result)
        if self.sitemaps.wanted(rules, result):
            self._side.sitemaps(raw, self.sitemaps.after_robots, miss.task, rules, result)
            return None
        return robots_outcome(miss.task, rules, result)

    def _outcome(
        self, raw: bytes, task: FetchTask, rules: RobotsRules, result: FetchResult
    ) -> bytes:
        try:
            return self.outcomes.finish(task, rules, result)
        except Exception:  # a bug: report the task to the master rather than lose it
            log.exception("crawl handler failed on %s", task.url)
            return task_error(raw, traceback.format_exc(limit=3))

    def _parse(self, pages: list[_Page], out: list[tuple[bytes, bytes]]) -> None:
        """Parse the small pages here, in the driver (their outcomes join ``out``), and hand
        the large ones to the parse threads. A hand-off costs 10-15 % more CPU than the
        parse of a typical page, and libxml2's time grows with the bytes, so a page under
        DEFAULT_PARSE_INLINE_BYTES holds the other fetches a few ms at most; a large (or
        hostile) one is parsed beside them, so it costs no other host's pages."""
        large = []
        i = 0
        while i < len(pages):
            page = pages[i]
            i += 1
            if len(page[3].body) > DEFAULT_PARSE_INLINE_BYTES:
                large.append(page)
                continue
            out.append((page[0], self._outcome(*page)))
            if self._slots.busy and self._multi is not None:
                # the fetches that ended meanwhile pass their host slots on now, not after
                # the whole poll's parsing (their pages join the ones to parse)
                self._collect(self._multi.tick(), out, pages)
        if large:
            self._side.parse(large, self._outcome)

    def in_flight(self) -> int:
        """Tasks started and not yet returned by :meth:`poll`."""
        started = len(self._multi) if self._multi is not None else 0
        return started + self._side.pending + len(self._slots)

    def close(self) -> None:
        """Drop the open connections (fetches still running are abandoned)."""
        self._closing.set()  # a sitemap read in progress sends no more requests
        self._side.close()
        try:
            self._slots.close()
        except Exception:  # Redis gone while stopping: the slots lapse on their own
            log.warning("host slots not given back; they lapse within the fetch deadline")
        self._closing.clear()
        if self._multi is not None:
            self._multi.close()
            self._multi = None
        self.writer.close()

    # -- the parts of a task ---------------------------------------------------
    def _begin(
        self, raw: bytes
    ) -> bytes | RobotsMiss | SitemapsOnly | tuple[FetchTask, RobotsRules]:
        """The task's outcome when it is over before any fetch, else what to fetch first."""
        try:
            task = FetchTask.decode(raw)
        except EnvelopeError:
            return task_error(raw, "malformed fetch task")
        _fetcher, robots = self.tools(task.strategy)
        site = origin(task.url)
        rules = robots.lookup(site)
        self._telemetry.add("robots_cache:miss" if rules is None else "robots_cache:hit")
        if rules is None:
            return RobotsMiss(site, task)
        if task.sitemaps and rules.deferred_until is None:
            return SitemapsOnly(task, rules)
        return self._ruled(task, rules)

    @staticmethod
    def _ruled(task: FetchTask, rules: RobotsRules) -> bytes | tuple[FetchTask, RobotsRules]:
        if rules.deferred_until is not None:
            return Deferred(task, rules.deferred_until).encode()
        if not rules.allowed(task.url):
            return Disallowed(task).encode()
        return task, rules

    def take_routed(self) -> dict[int, list[bytes]]:
        """The messages for other partitions kept so far (the runtime pushes them)."""
        return self.links.take_routed()

    def forget(self) -> None:
        """Forget the links sent so far: results that carried some were refused (see runtime)."""
        self.links.forget()

    def drained(self) -> bool:
        """True once the crawl has nothing queued and nothing in flight (``--burst`` leaves)."""
        return not work_left(self.client, self.keys)

    def flush(self) -> None:
        """Store the pages of every task handled so far (the runtime calls it before an ack)."""
        self.writer.flush()

    def held(self, final: bool) -> bool:
        """Whether the rows flushed so far wait for their WARC object (an object store);
        ``final``: publish the open spool file now (see :meth:`PageWriter.release`)."""
        return self.writer.release(final)

    def stats(self) -> dict[str, float]:
        counts = self.outcomes.counts
        return {
            "threads": self.threads,
            "in_flight": self.in_flight(),
            "pages": counts.pages,
            "errors": counts.errors,
            "retries": counts.retries,
            "invalid_links": counts.invalid_links,
            "unchanged": counts.unchanged,
            "kept": counts.kept,
            "cache_hit_rate": round(self.links.hit_rate, 4),
            "stored_bare": self.writer.stored_bare,
            "store_dropped": self.writer.dropped,
            "warc_revisits": self.writer.revisits,
        }
