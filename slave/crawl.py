"""The crawl phase on a slave: one fetch task in, one outcome out.

srq task → robots (cluster-wide cache) → fetch → decode → parse → page and
links queued for the store → nrq outcome with the page's links, canonical and
fingerprinted here once (the master judges them as they are), repeats dropped
by a local CLOCK cache (queues/link_cache.py); the runtime stores the queued
pages in one transaction (:meth:`CrawlHandler.flush`) before it acknowledges
their tasks. The messages are those of queues/crawl_protocol.py.
"""

from __future__ import annotations

import contextlib
import logging
import re
import select
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from srcrawl.config import Config
from srcrawl.defaults import (
    DEFAULT_FETCH_THREADS,
    DEFAULT_FETCH_TRIES,
    DEFAULT_LINK_CACHE,
    DEFAULT_PARSE_INLINE_BYTES,
    DEFAULT_PARSE_THREADS,
    DEFAULT_SITEMAP_THREADS,
)
from srcrawl.errors import EnvelopeError
from srcrawl.queues.crawl_protocol import (
    COULD_NOT_CONNECT,
    UNKNOWN_HOST,
    Deferred,
    Disallowed,
    Fetched,
    FetchTask,
    Links,
    Retry,
    RobotsFetched,
    canonical_links,
    task_error,
    work_left,
)
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.crawl_strategy import load as load_strategy
from srcrawl.queues.link_cache import ClockCache
from srcrawl.queues.partitions import partition_of_url
from srcrawl.slave.decode import decode_html, is_html, utf8_source
from srcrawl.slave.fetch import (
    BODY_CAPPED,
    BODY_COMPLETE,
    NOT_MODIFIED,
    Fetcher,
    FetchMulti,
    FetchResult,
    request_head,
)
from srcrawl.slave.fetch_policy import FetchPolicy
from srcrawl.slave.page_writer import PageWriter
from srcrawl.slave.parse import MAX_ANCHOR_CHARS, parse_html
from srcrawl.slave.revisit import conditional_headers, is_gone, page_digest, validators
from srcrawl.slave.robots import RobotsCache, RobotsRules, robots_url
from srcrawl.slave.sitemaps import SitemapLimits, SitemapReport, read_host_sitemaps
from srcrawl.sql.pages import Page, Touch, compress_body
from srcrawl.telemetry import Cumulative, Telemetry
from srcrawl.urls import InvalidURL, canonicalize, fingerprint, host_of, origin
from srcrawl.warc.output import WarcOutput
from srcrawl.warc.records import PreparedFetch, prepare_fetch, prepare_not_modified
from srcrawl.warc.storage import LocalWarcStorage

_STRATEGY_REFRESH = 5.0

log = logging.getLogger("srcrawl.slave")


_CURL_CODE = re.compile(r"libcurl error (\d+):")
_CONNECT_REASONS = {6: UNKNOWN_HOST, 7: COULD_NOT_CONNECT}


def failure_reason(result: FetchResult) -> str:
    """A few words on why a request failed, for the user (``could not connect``, ``HTTP 503``)."""
    if result.status:
        return f"HTTP {result.status}"
    code = _CURL_CODE.match(result.detail)
    if code and int(code.group(1)) in _CONNECT_REASONS:
        return _CONNECT_REASONS[int(code.group(1))]
    return (result.error or "failed").replace("_", " ")


@dataclass(frozen=True, slots=True)
class _RobotsMiss:
    """A task whose host has no robots.txt cached: fetching it is the task's request."""

    site: str
    task: FetchTask


@dataclass(frozen=True, slots=True)
class _SitemapsOnly:
    """A sitemap task on a host whose robots.txt is cached: its sitemaps are the requests."""

    task: FetchTask
    rules: RobotsRules


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
        self, cfg: Config, *, threads: int = DEFAULT_FETCH_THREADS, parser: str = "lxml"
    ) -> None:
        self.cfg = cfg
        self.threads = threads
        self.parser = parser
        self._version = -1
        self._checked = 0.0
        self._tools: tuple[Fetcher, RobotsCache] | None = None
        self.strategy = CrawlStrategy()
        self._sitemap_fetcher: Fetcher | None = None
        self._sitemap_pool: ThreadPoolExecutor | None = None
        self._closing = threading.Event()
        self.cache = ClockCache(DEFAULT_LINK_CACHE)
        self.writer = PageWriter(cfg.store())
        self._lock = threading.Lock()
        self.pages = 0
        self.errors = 0
        self.retries = 0
        self.invalid_links = 0
        self.unchanged = 0
        """Recrawled pages found unchanged (a 304 or the same digest): nothing stored anew."""
        self.kept = 0
        """Recrawls that failed for a passing reason: the stored version was kept."""
        self._routed: dict[int, list[bytes]] = {}
        """Links for other partitions' hosts, by partition, until the acker pushes them."""
        self._multi: FetchMulti | None = None
        self._tries = DEFAULT_FETCH_TRIES
        self._user_agent = ""
        self._pool: ThreadPoolExecutor | None = None
        self._parsing = 0  # pages handed to the pool whose outcome poll() has not returned
        self._parsed: deque[tuple[bytes, bytes]] = deque()
        self._parsed_r, self._parsed_w = socket.socketpair()
        self._parsed_r.setblocking(False)
        self._parsed_w.setblocking(False)
        self._telemetry = Telemetry()
        self._warc_totals = Cumulative()

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
        """Fetcher and robots cache set up by the crawl's strategy document.

        The document is read again every few seconds and the tools rebuilt
        when its version changed, so `srcrawl crawl --fetch-timeout …` reaches
        slaves that were started long before; at once for a task that needs at
        least ``version`` (a seed given again once the crawl may reach it).
        """
        now = time.monotonic()
        stale = version > self._version
        if self._tools is not None and not stale and now - self._checked < _STRATEGY_REFRESH:
            return self._tools
        with self._lock:
            if self._tools is None or stale or now - self._checked >= _STRATEGY_REFRESH:
                self._checked = now
                strategy = load_strategy(self.cfg.redis(), self.cfg.keys) or CrawlStrategy()
                if self._tools is None or strategy.version != self._version:
                    fetcher = Fetcher(
                        read_timeout=strategy.fetch_timeout,
                        max_bytes=strategy.max_page_bytes,
                        user_agent=strategy.user_agent,
                        policy=FetchPolicy.of(strategy),
                    )
                    robots = RobotsCache(
                        self.cfg.redis(),
                        self.cfg.keys,
                        fetcher,
                        strategy.robots_ttl,
                        defer=strategy.robots_defer,
                        user_agent=strategy.user_agent,
                    )
                    self._tools = (fetcher, robots)
                    self.strategy = strategy
                    # a sitemap is read up to its own cap (one byte more tells a cut one)
                    self._sitemap_fetcher = Fetcher(
                        read_timeout=strategy.fetch_timeout,
                        max_bytes=SitemapLimits().max_bytes + 1,
                        user_agent=strategy.user_agent,
                        policy=fetcher.policy,
                    )
                    self._version = strategy.version
                    self._tries = strategy.fetch_tries
                    self._user_agent = strategy.user_agent
                    self._use_warc(strategy.body_store == "warc", strategy.warc_max_bytes)
        return self._tools

    def _use_warc(self, on: bool, max_bytes: int) -> None:
        """Keep bodies in WARC files (``on``) or in the store, as the strategy says."""
        self.writer.use_warc(
            on, lambda: WarcOutput(LocalWarcStorage(self.cfg.warc_root), self.cfg.job, max_bytes)
        )
        if self.writer.warc is not None:
            self.writer.warc.max_bytes = max_bytes

    # -- one task at a time (tests) -------------------------------------------
    def _one(self, raw: bytes) -> bytes:
        step = self._begin(raw)
        if isinstance(step, bytes):
            return step
        fetcher, robots = self.tools()
        if isinstance(step, _RobotsMiss):
            rules, result = robots.fetch_and_store(step.site)
            return self._after_robots(step.task, rules, result, self._sitemaps(rules, result))
        if isinstance(step, _SitemapsOnly):
            return self._sitemaps_only(step)
        task, rules = step
        result = fetcher.fetch(task.url, conditional_headers(task))
        self._count(result)
        return self._retry(task, rules, result) or self._finish(task, rules, result)

    # -- many at once, driven by the runtime's one crawl thread ----------------
    def start(self, raw: bytes) -> bytes | None:
        """Begin ``raw``: its outcome if it needs no fetch, else None (``poll`` returns it).

        Its fetch joins the multi handle: the page's, or on a host whose
        robots.txt is not cached yet, the robots.txt's (this task's request
        to the host; the page waits its politeness turn).
        """
        step = self._begin(raw)
        if isinstance(step, bytes):
            return step
        fetcher, _robots = self.tools()
        if self._multi is None:
            self._multi = FetchMulti(fetcher.host_pools)
        if isinstance(step, _RobotsMiss):
            self._multi.add(fetcher, robots_url(step.site), (raw, step, 0))
        elif isinstance(step, _SitemapsOnly):
            self._beside(raw, self._sitemaps_only, step)
        else:
            task, rules = step
            self._multi.add(fetcher, task.url, (raw, task, rules), conditional_headers(task))
        return None

    def poll(self, timeout: float, wake_fd: int) -> list[tuple[bytes, bytes]]:
        """Wait up to ``timeout`` s for fetches and parses (or ``wake_fd``); the finished tasks."""
        if self._multi is None:
            if timeout > 0:
                select.select([wake_fd], [], [], timeout)
            return []
        out: list[tuple[bytes, bytes]] = []
        pages: list[tuple[bytes, FetchTask, RobotsRules, FetchResult]] = []
        fds = [fd for fd in (wake_fd, self._parsed_r.fileno()) if fd >= 0]
        for (raw, what, extra), result in self._multi.wait(timeout, fds):  # type: ignore[misc]
            if isinstance(what, _RobotsMiss):
                fetcher, robots = self.tools()
                if result.redirect is not None and extra < robots.max_redirects:
                    self._multi.add(fetcher, result.redirect, (raw, what, extra + 1))
                    continue
                rules = robots.store(what.site, result)
                if self._wants_sitemaps(rules, result):
                    self._read_beside(raw, what.task, rules, result)
                else:
                    out.append((raw, self._after_robots(what.task, rules, result)))
                continue
            self._count(result)
            retry = self._retry(what, extra, result)
            if retry is not None:
                out.append((raw, retry))
            else:
                pages.append((raw, what, extra, result))
        self._parse(pages, out)
        with contextlib.suppress(OSError):  # BlockingIOError once drained
            while self._parsed_r.recv(4096):
                pass
        while self._parsed:
            out.append(self._parsed.popleft())
            self._parsing -= 1
        return out

    def _outcome(
        self, raw: bytes, task: FetchTask, rules: RobotsRules, result: FetchResult
    ) -> bytes:
        try:
            return self._finish(task, rules, result)
        except Exception:  # a bug: report the task to the master rather than lose it
            log.exception("crawl handler failed on %s", task.url)
            return task_error(raw, traceback.format_exc(limit=3))

    def _parse(
        self, pages: list[tuple[bytes, FetchTask, RobotsRules, FetchResult]], out: list
    ) -> None:
        """Parse the small pages here, in the driver (their outcomes join ``out``), and hand
        the large ones to the parse threads. A hand-off costs 10-15 % more CPU than the
        parse of a typical page, and libxml2's time grows with the bytes, so a page under
        DEFAULT_PARSE_INLINE_BYTES holds the other fetches a few ms at most; a large (or
        hostile) one is parsed beside them, so it costs no other host's pages."""
        large = []
        for page in pages:
            if len(page[3].body) > DEFAULT_PARSE_INLINE_BYTES:
                large.append(page)
            else:
                out.append((page[0], self._outcome(*page)))
        if large:
            # one hand-off for the large pages of one wait: fewer thread switches
            if self._pool is None:
                self._pool = ThreadPoolExecutor(DEFAULT_PARSE_THREADS, "crawl-parse")
            self._parsing += len(large)
            self._pool.submit(self._parse_beside, large)

    def _parse_beside(self, pages: list[tuple[bytes, FetchTask, RobotsRules, FetchResult]]) -> None:
        """A parse thread's work: the tasks' outcomes, handed to the driver."""
        for raw, task, rules, result in pages:
            self._parsed.append((raw, self._outcome(raw, task, rules, result)))
        with contextlib.suppress(OSError):  # BlockingIOError: a wake-up is pending already
            self._parsed_w.send(b"x")

    def _read_beside(
        self, raw: bytes, task: FetchTask, rules: RobotsRules, result: FetchResult
    ) -> None:
        """Read the host's sitemaps in a pool thread; the task's outcome comes through poll().

        The task holds its host meanwhile (the master sends none of its other
        URLs before this outcome), so the sitemap requests keep its politeness.
        """
        self._beside(raw, self._sitemaps_after_robots, task, rules, result)

    def _beside(self, raw: bytes, read: Callable[..., bytes], *args: object) -> None:
        """``read(*args)`` in a sitemap thread; its outcome comes through poll()."""
        if self._sitemap_pool is None:
            self._sitemap_pool = ThreadPoolExecutor(DEFAULT_SITEMAP_THREADS, "crawl-sitemaps")
        self._parsing += 1
        self._sitemap_pool.submit(self._sitemaps_beside, raw, read, args)

    def _sitemaps_beside(self, raw: bytes, read: Callable[..., bytes], args: tuple) -> None:
        try:
            outcome = read(*args)
        except Exception:  # a bug: report the task to the master rather than lose it
            log.exception("reading sitemaps failed")
            outcome = task_error(raw, traceback.format_exc(limit=3))
        self._parsed.append((raw, outcome))
        with contextlib.suppress(OSError):
            self._parsed_w.send(b"x")

    def _sitemaps_after_robots(
        self, task: FetchTask, rules: RobotsRules, result: FetchResult
    ) -> bytes:
        try:
            return self._after_robots(task, rules, result, self._sitemaps(rules, result))
        except Exception:  # a bug: the task goes on without the sitemaps rather than be lost
            log.exception("reading the sitemaps of %s failed", rules.origin)
            return self._after_robots(task, rules, result)

    def _sitemaps_only(self, step: _SitemapsOnly) -> bytes:
        """Read the sitemaps of a host whose robots.txt is cached. The frontier released
        the task at the host's politeness turn: the first request goes at once."""
        first = [True]
        strategy, rules = self.strategy, step.rules

        def wait(fetch_ms: float) -> float:
            if first[0]:
                first[0] = False
                return 0.0
            return strategy.politeness_ms(fetch_ms, rules.crawl_delay) / 1000

        report, fetch_ms = SitemapReport(), 0.0
        if strategy.sitemaps and self._sitemap_fetcher is not None:
            report, fetch_ms = read_host_sitemaps(
                rules, self._sitemap_fetcher, wait, after_ms=0.0, stopping=self._closing.is_set
            )
        entries = [(url, fingerprint(url), when) for url, when in report.urls.items()]
        return RobotsFetched(
            step.task, fetch_ms, rules.crawl_delay, entries, report.counters()
        ).encode()

    def _wants_sitemaps(self, rules: RobotsRules, result: FetchResult) -> bool:
        """Read the host's sitemaps: the crawl asks for them and its robots.txt answered."""
        return self.strategy.sitemaps and rules.deferred_until is None and result.status > 0

    def _sitemaps(self, rules: RobotsRules, result: FetchResult) -> tuple[SitemapReport, float]:
        """The host's sitemaps (see read_host_sitemaps), read now; none when not wanted."""
        if not self._wants_sitemaps(rules, result) or self._sitemap_fetcher is None:
            return SitemapReport(), result.elapsed_ms
        strategy = self.strategy
        return read_host_sitemaps(
            rules,
            self._sitemap_fetcher,
            lambda fetch_ms: strategy.politeness_ms(fetch_ms, rules.crawl_delay) / 1000,
            after_ms=result.elapsed_ms,
            stopping=self._closing.is_set,
        )

    def in_flight(self) -> int:
        """Tasks started and not yet returned by :meth:`poll`."""
        return (len(self._multi) if self._multi is not None else 0) + self._parsing

    def close(self) -> None:
        """Drop the open connections (fetches still running are abandoned)."""
        self._closing.set()  # a sitemap read in progress sends no more requests
        for pool in (self._pool, self._sitemap_pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._pool = self._sitemap_pool = None
        self._closing.clear()
        self._parsed.clear()
        self._parsing = 0
        if self._multi is not None:
            self._multi.close()
            self._multi = None
        self.writer.close()

    # -- the parts of a task ---------------------------------------------------
    def _begin(
        self, raw: bytes
    ) -> bytes | _RobotsMiss | _SitemapsOnly | tuple[FetchTask, RobotsRules]:
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
            return _RobotsMiss(site, task)
        if task.sitemaps and rules.deferred_until is None:
            return _SitemapsOnly(task, rules)
        return self._ruled(task, rules)

    @staticmethod
    def _ruled(task: FetchTask, rules: RobotsRules) -> bytes | tuple[FetchTask, RobotsRules]:
        if rules.deferred_until is not None:
            return Deferred(task, rules.deferred_until).encode()
        if not rules.allowed(task.url):
            return Disallowed(task).encode()
        return task, rules

    @staticmethod
    def _after_robots(
        task: FetchTask,
        rules: RobotsRules,
        result: FetchResult,
        sitemaps: tuple[SitemapReport, float] | None = None,
    ) -> bytes:
        """The outcome of a task whose request went to the host's robots.txt (and its
        sitemaps: their report and the last request's time)."""
        if rules.deferred_until is None:
            # the master queues the page again, for its politeness turn
            if sitemaps is None:
                return RobotsFetched(task, result.elapsed_ms, rules.crawl_delay).encode()
            report, fetch_ms = sitemaps
            entries = [(url, fingerprint(url), when) for url, when in report.urls.items()]
            return RobotsFetched(
                task, fetch_ms, rules.crawl_delay, entries, report.counters()
            ).encode()
        return Deferred(task, rules.deferred_until, failure_reason(result)).encode()

    def _retry(self, task: FetchTask, rules: RobotsRules, result: FetchResult) -> bytes | None:
        """A ``retry`` outcome when the fetch failed for a passing reason and tries remain.

        The page is not stored: the master queues the task again after a back-off.
        """
        if not result.transient or task.failed + 1 >= self._tries:
            return None
        with self._lock:
            self.retries += 1
        return Retry(
            task,
            result.status,
            result.error,
            result.elapsed_ms,
            rules.crawl_delay,
            result.retry_after,
        ).encode()

    def _finish(self, task: FetchTask, rules: RobotsRules, result: FetchResult) -> bytes:
        """Parse and queue the fetched page for the store; the task's outcome."""
        if task.recrawl:
            if result.status == NOT_MODIFIED:
                return self._unchanged(task, rules, result, task.digest)
            if result.transient:  # its tries are spent: the stored version stays
                with self._lock:
                    self.kept += 1
                return Fetched(
                    task,
                    result.status,
                    result.elapsed_ms,
                    rules.crawl_delay,
                    error=result.error,
                    next=task,
                ).encode()
        url, fp, depth = task.url, task.fp, task.depth
        title = text = ""
        links: list[str] = []
        anchors: dict[str, str] = {}
        state = result.body_state
        digest = None
        if result.redirect:
            links = [result.redirect]
        elif state in (BODY_COMPLETE, BODY_CAPPED) and is_html(result.content_type, result.body):
            html, encoding = decode_html(result.body, result.content_type)
            utf8 = utf8_source(result.body, html, encoding)
            parsed = parse_html(html, url, self.parser, utf8=utf8)
            title = parsed.title
            text = "" if parsed.noindex else parsed.text
            links = [] if parsed.nofollow else parsed.links
            anchors = parsed.anchors
            digest = page_digest(title, text)
        if task.recrawl and digest is not None and digest == task.digest and result.ok:
            return self._unchanged(task, rules, result, digest, text)
        changed = None if is_gone(result) else True
        nxt = self._next(task, result, digest, changed)
        canonical, invalid = canonical_links(links)
        page = Page(
            fp=fp,
            url=url,
            host=host_of(url),
            depth=depth,
            status=result.status,
            content_type=result.content_type,
            fetched_at=time.time(),
            fetch_ms=int(result.elapsed_ms),
            title=title,
            text=text,
            error=result.error,
            body_state=state,
            etag=nxt.etag,
            last_modified=nxt.modified,
            digest=digest,
            revisit=nxt.revisit,
            next_fetch=time.time() + nxt.revisit,
        )
        record = self._body(page, result, conditional_headers(task))
        # stored by flush(), before the runtime acknowledges this task
        texts = canonical_anchors(canonical, anchors) if anchors and canonical else {}
        self.writer.add(
            [page],
            [(fp, dst, texts.get(dst)) for dst in canonical.values()],
            [(page, record)] if record is not None else (),
        )
        with self._lock:
            # a link found again nearer a seed is news for the master (the cache keeps depths)
            emit = [(c, f) for c, f in canonical.items() if not self.cache.seen_or_add(f, depth)]
            self.pages += 1
            self.errors += result.error is not None
            self.invalid_links += invalid
        if self.strategy.partitions > 1:
            emit = self._route(task, emit)
        return Fetched(
            task,
            result.status,
            result.elapsed_ms,
            rules.crawl_delay,
            emit,
            result.error,
            invalid,
            next=nxt,
            changed=changed if task.recrawl else None,
        ).encode()

    def _route(self, task: FetchTask, links: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The links of the task's own partition; the others are kept for the partitions
        that own their hosts (queues/partitions.py), pushed before the task's ack."""
        n = self.strategy.partitions
        own = partition_of_url(task.url, n)
        mine: list[tuple[str, int]] = []
        theirs: dict[int, list[tuple[str, int]]] = {}
        for link in links:
            p = partition_of_url(link[0], n)
            if p == own:
                mine.append(link)
            else:
                theirs.setdefault(p, []).append(link)
        if theirs:
            with self._lock:
                for p, entries in theirs.items():
                    self._routed.setdefault(p, []).append(Links(entries, task.depth + 1).encode())
        return mine

    def take_routed(self) -> dict[int, list[bytes]]:
        """The messages for other partitions kept so far (the runtime pushes them)."""
        with self._lock:
            routed, self._routed = self._routed, {}
        return routed

    def _next(
        self, task: FetchTask, result: FetchResult, digest: int | None, changed: bool | None
    ) -> FetchTask:
        """The page's next fetch: its validators, digest and interval (the strategy's)."""
        etag, modified = validators(result, task)
        interval, history = self.strategy.plan_revisit(
            task.revisit, changed, task.history, time.time()
        )
        return FetchTask(
            task.url,
            task.fp,
            task.depth,
            task.queue,
            revisit=interval,
            etag=etag,
            modified=modified,
            digest=digest,
            history=history,
        )

    def _unchanged(
        self,
        task: FetchTask,
        rules: RobotsRules,
        result: FetchResult,
        digest: int | None,
        text: str = "",
    ) -> bytes:
        """A recrawl found the stored version current (a 304, or the same digest of its
        ``text``): only its fetch time, validators and schedule are written, and its WARC
        records (a revisit, see slave/page_writer.py); no parse of it is stored, no new
        index entry."""
        nxt = self._next(task, result, digest, False)
        now = time.time()
        touch: Touch = (
            task.fp,
            now,
            int(result.elapsed_ms),
            nxt.etag,
            nxt.modified,
            nxt.revisit,
            now + nxt.revisit,
        )
        record = self._recheck(task, result, now, text)
        self.writer.touch([touch], [(task.fp, record)] if record is not None else ())
        with self._lock:
            self.pages += 1
            self.unchanged += 1
        return Fetched(
            task, result.status, result.elapsed_ms, rules.crawl_delay, next=nxt, changed=False
        ).encode()

    def _recheck(
        self, task: FetchTask, result: FetchResult, fetched_at: float, text: str
    ) -> PreparedFetch | None:
        """An unchanged recrawl's WARC records: a 304's request and head (the writer adds
        the revisit naming the stored record), or a 200's records (written as a revisit too,
        unless its body is not the stored one); None as for :meth:`_records`."""
        sent = conditional_headers(task)
        if self.writer.warc is None or result.status != NOT_MODIFIED:
            return self._records(task.url, result, fetched_at, text, sent)
        return prepare_not_modified(
            task.url,
            headers=result.headers,
            ip=result.ip,
            fetched_at=fetched_at,
            request=request_head(task.url, self._user_agent, sent),
        )

    def _body(self, page: Page, result: FetchResult, sent: list[str]) -> PreparedFetch | None:
        """Keep the body: the page's WARC records (the writer appends them, with the text
        as a conversion record), or in the row."""
        if self.writer.warc is None:
            page.body = compress_body(result.body) if result.body else None
            return None
        record = self._records(page.url, result, page.fetched_at, page.text, sent)
        if record is not None:
            page.payload_digest = record.digest
        return record

    def _records(
        self, url: str, result: FetchResult, fetched_at: float, text: str, sent: list[str]
    ) -> PreparedFetch | None:
        """The fetch's WARC records (the request with the conditional headers ``sent``);
        None without WARC output or without a response."""
        if self.writer.warc is None or not result.status:
            return None
        return prepare_fetch(
            url,
            status=result.status,
            headers=result.headers,
            body=result.body,
            ip=result.ip,
            fetched_at=fetched_at,
            request=request_head(url, self._user_agent, sent),
            truncated=result.truncated,
            text=text,
        )

    def forget(self) -> None:
        """Forget the links sent so far: results that carried some were refused (see runtime)."""
        with self._lock:
            self.cache = ClockCache(DEFAULT_LINK_CACHE)

    def drained(self) -> bool:
        """True once the crawl has nothing queued and nothing in flight (``--burst`` leaves)."""
        return not work_left(self.cfg.redis(), self.cfg.keys)

    def flush(self) -> None:
        """Store the pages of every task handled so far (the runtime calls it before an ack)."""
        self.writer.flush()

    def stats(self) -> dict[str, float]:
        return {
            "threads": self.threads,
            "in_flight": self.in_flight(),
            "pages": self.pages,
            "errors": self.errors,
            "retries": self.retries,
            "invalid_links": self.invalid_links,
            "unchanged": self.unchanged,
            "kept": self.kept,
            "cache_hit_rate": round(self.cache.hit_rate, 4),
            "stored_bare": self.writer.stored_bare,
            "store_dropped": self.writer.dropped,
            "warc_revisits": self.writer.revisits,
        }


def canonical_anchors(canonical: dict[str, int], anchors: dict[str, str]) -> dict[int, str]:
    """Link fingerprint -> anchor text, from the parser's URL -> anchor text.

    Most links are canonical as parsed; the others are canonicalized again to
    find their fingerprint, and the texts of links that meet there are joined.
    """
    out: dict[int, str] = {}
    for url, text in anchors.items():
        fp = canonical.get(url)
        if fp is None:
            try:
                fp = canonical.get(canonicalize(url))
            except InvalidURL:
                continue
            if fp is None:
                continue
        seen = out.get(fp)
        out[fp] = text if seen is None else f"{seen} {text}"[:MAX_ANCHOR_CHARS].rstrip()
    return out
