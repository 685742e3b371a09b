"""What a finished fetch becomes: the task's outcome, and the page queued for the store.

A fetch that failed for a passing reason with tries left is a ``retry``
outcome. Otherwise the page is decoded and parsed (HTML only), its body
kept (in WARC records or in its row), page and links queued for the store
(the runtime stores them, :meth:`CrawlHandler.flush`, before it acknowledges
the task), its next fetch planned by the strategy, and its links emitted
(slave/links.py) in a ``fetched`` outcome. A recrawl that finds the stored
version current (a 304, or the same digest) writes only its fetch time,
validators and schedule.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from srcrawl.core.urls import host_of
from srcrawl.queues.crawl_protocol import Fetched, FetchTask, Retry, canonical_links
from srcrawl.slave.crawl_tools import CrawlTools
from srcrawl.slave.decode import decode_html, is_html, utf8_source
from srcrawl.slave.fetch import BODY_CAPPED, BODY_COMPLETE, NOT_MODIFIED, FetchResult, request_head
from srcrawl.slave.links import LinkEmitter, canonical_anchors
from srcrawl.slave.page_writer import PageWriter
from srcrawl.slave.parse import parse_html
from srcrawl.slave.revisit import conditional_headers, is_gone, page_digest, validators
from srcrawl.slave.robots import RobotsRules
from srcrawl.sql.pages import Page, Touch, compress_body
from srcrawl.warc.records import PreparedFetch, prepare_fetch, prepare_not_modified


@dataclass
class _Parsed:
    """What the page's parse gave: the text to store and index, and the links."""

    title: str = ""
    text: str = ""
    links: list[str] = field(default_factory=list)
    anchors: dict[str, str] = field(default_factory=dict)
    digest: int | None = None


@dataclass
class PageCounts:
    """The crawl handler's counters of finished fetches (read for the heartbeat)."""

    pages: int = 0
    errors: int = 0
    retries: int = 0
    invalid_links: int = 0
    unchanged: int = 0
    """Recrawled pages found unchanged (a 304 or the same digest): nothing stored anew."""
    kept: int = 0
    """Recrawls that failed for a passing reason: the stored version was kept."""


class PageOutcomes:
    """Turns finished fetches into outcomes, queuing their pages in ``writer``."""

    def __init__(
        self, tools: CrawlTools, writer: PageWriter, links: LinkEmitter, parser: str
    ) -> None:
        self.tools = tools
        self.writer = writer
        self.links = links
        self.parser = parser
        self.counts = PageCounts()
        self._lock = threading.Lock()

    def retry(self, task: FetchTask, rules: RobotsRules, result: FetchResult) -> bytes | None:
        """A ``retry`` outcome when the fetch failed for a passing reason and tries remain.

        The page is not stored: the master queues the task again after a back-off.
        """
        if not result.transient or task.failed + 1 >= self.tools.tries:
            return None
        with self._lock:
            self.counts.retries += 1
        return Retry(
            task,
            result.status,
            result.error,
            result.elapsed_ms,
            rules.crawl_delay,
            result.retry_after,
        ).encode()

    def finish(self, task: FetchTask, rules: RobotsRules, result: FetchResult) -> bytes:
        """Parse and queue the fetched page for the store; the task's outcome."""
        if task.recrawl:
            if result.status == NOT_MODIFIED:
                return self._unchanged(task, rules, result, task.digest)
            if result.transient:  # its tries are spent: the stored version stays
                with self._lock:
                    self.counts.kept += 1
                return Fetched(
                    task,
                    result.status,
                    result.elapsed_ms,
                    rules.crawl_delay,
                    error=result.error,
                    next=task,
                ).encode()
        parsed = self._parse(task, result)
        digest = parsed.digest
        if task.recrawl and digest is not None and digest == task.digest and result.ok:
            return self._unchanged(task, rules, result, digest, parsed.text)
        changed = None if is_gone(result) else True
        nxt = self._next(task, result, digest, changed)
        canonical, invalid = canonical_links(parsed.links)
        self._store(task, result, parsed, nxt, canonical)
        with self._lock:
            self.counts.pages += 1
            self.counts.errors += result.error is not None
            self.counts.invalid_links += invalid
        emit = self.links.emit(task, canonical, self.tools.strategy.partitions)
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

    def _parse(self, task: FetchTask, result: FetchResult) -> _Parsed:
        """The page's title, text and links (a redirect's one link: its target)."""
        if result.redirect:
            return _Parsed(links=[result.redirect])
        if result.body_state not in (BODY_COMPLETE, BODY_CAPPED) or not is_html(
            result.content_type, result.body
        ):
            return _Parsed()
        html, encoding = decode_html(result.body, result.content_type)
        utf8 = utf8_source(result.body, html, encoding)
        parsed = parse_html(html, task.url, self.parser, utf8=utf8)
        text = "" if parsed.noindex else parsed.text
        return _Parsed(
            title=parsed.title,
            text=text,
            links=[] if parsed.nofollow else parsed.links,
            anchors=parsed.anchors,
            digest=page_digest(parsed.title, text),
        )

    def _store(
        self,
        task: FetchTask,
        result: FetchResult,
        parsed: _Parsed,
        nxt: FetchTask,
        canonical: dict[str, int],
    ) -> None:
        """Queue the page, its links with their anchor texts and its WARC records for
        the store (written by flush(), before the runtime acknowledges the task)."""
        page = Page(
            fp=task.fp,
            url=task.url,
            host=host_of(task.url),
            depth=task.depth,
            status=result.status,
            content_type=result.content_type,
            fetched_at=time.time(),
            fetch_ms=int(result.elapsed_ms),
            title=parsed.title,
            text=parsed.text,
            error=result.error,
            body_state=result.body_state,
            etag=nxt.etag,
            last_modified=nxt.modified,
            digest=parsed.digest,
            revisit=nxt.revisit,
            next_fetch=time.time() + nxt.revisit,
        )
        record = self._body(page, result, conditional_headers(task))
        anchors = parsed.anchors
        texts = canonical_anchors(canonical, anchors) if anchors and canonical else {}
        self.writer.add(
            [page],
            [(task.fp, dst, texts.get(dst)) for dst in canonical.values()],
            [(page, record)] if record is not None else (),
        )

    def _next(
        self, task: FetchTask, result: FetchResult, digest: int | None, changed: bool | None
    ) -> FetchTask:
        """The page's next fetch: its validators, digest and interval (the strategy's)."""
        etag, modified = validators(result, task)
        interval, history = self.tools.strategy.plan_revisit(
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
            self.counts.pages += 1
            self.counts.unchanged += 1
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
            request=request_head(task.url, self.tools.user_agent, sent),
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
            request=request_head(url, self.tools.user_agent, sent),
            truncated=result.truncated,
            text=text,
        )
