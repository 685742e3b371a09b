"""Group commit of fetched pages: many fetches, one store transaction.

The crawl's driver thread adds each page and its links and goes on to
the next; the slave's acker calls :meth:`PageWriter.flush` before it acknowledges the
tasks that finished meanwhile, so one transaction stores every page of
the batch it is about to acknowledge. A page is acknowledged only once it
is stored, yet the store sees one transaction per batch, not per page, and
no fetch waits for the store (nor switches to a writer thread and
back, which cost more CPU than the insert itself).

A batch that keeps failing is stored page by page: a page the store
refuses whatever happens (a text over what its column holds, a packet
over the server's limit) is stored without its title, text and body, so
that one hostile page never holds back the crawl; one whose bare row is
refused for its data too (a constraint) is dropped and counted. Only when
a bare page fails for another reason is the store taken to be down: the
pages wait for the next flush, and their tasks for their ack.

With a :class:`~srcrawl.slave.warc.WarcOutput`, each flush first appends the
batch's WARC records (handed to the OS: every reader sees them), then writes the
rows that point into them while another thread makes the records durable (one
fsync), and returns once both are done: a page is acknowledged only when its
record is durable, and a crash before that leaves its task unacknowledged, so
the page is fetched again and its row rewritten. The fsync's wait overlaps
the store's (docs/BENCHMARKS.md, "WARC storage, again"). A page whose
body the store already holds under the same payload digest gets a revisit
record, and its row keeps pointing at the first one.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from srcrawl.errors import StoreDataError, StoreError
from srcrawl.slave.warc import (
    Original,
    Pointer,
    PreparedFetch,
    WarcError,
    WarcOutput,
    original_record,
    revisit_record,
)
from srcrawl.sql.store import Link, Page, Store, StoredPayload, Touch

log = logging.getLogger("srcrawl.slave")

_RETRIES = 5
_BACKOFF = 0.2  # seconds before the second attempt; doubled each time, at most 5 s


class PageWriter:
    """Pages and links added by any thread, stored by :meth:`flush` in one transaction."""

    def __init__(self, store: Store, warc: WarcOutput | None = None) -> None:
        self.store = store
        self.warc = warc
        self._pages: list[Page] = []
        self._links: list[Link] = []
        self._records: list[tuple[Page, PreparedFetch]] = []
        self.revisits = 0
        """Pages written as WARC revisit records (their body was stored already)."""
        self._touches: list[Touch] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._syncer = ThreadPoolExecutor(1, thread_name_prefix="warc-sync")
        self.stored_bare = 0
        """Pages the store refused whole, stored without title, text and body."""
        self.dropped = 0
        """Pages not stored in any form (an error that is not the store's)."""

    def add(
        self, pages: Sequence[Page], links: Sequence[Link],
        records: Sequence[tuple[Page, PreparedFetch]] = (),
    ) -> None:  # fmt: skip
        """Queue ``pages`` and ``links`` (src, dst, anchor text) for the next :meth:`flush`,
        and the WARC ``records`` of some of those pages."""
        with self._lock:
            self._pages.extend(pages)
            self._links.extend(links)
            self._records.extend(records)

    def touch(self, touches: Sequence[Touch]) -> None:
        """Queue pages found unchanged by a recrawl for the next :meth:`flush`."""
        with self._lock:
            self._touches.extend(touches)

    def _flush_touches(self) -> None:
        """Write the queued touches (retried like pages); StoreError leaves them queued."""
        with self._lock:
            touches, self._touches = self._touches, []
        if not touches:
            return
        for attempt in range(_RETRIES):
            try:
                self.store.touch_pages(touches)
                return
            except StoreError as e:
                log.warning("store write failed (attempt %d): %s", attempt + 1, e)
                if attempt == _RETRIES - 1:
                    with self._lock:
                        self._touches[:0] = touches
                    raise
                time.sleep(min(2**attempt * _BACKOFF, 5.0))

    def flush(self) -> int:
        """Store everything added so far; return the page count.

        One transaction for all; a busy or restarting database is retried a
        few times, then the pages are stored one at a time (see the module
        docstring). Raises StoreError when the store is down: the pages wait
        for the next flush (the runtime acknowledges none of their tasks
        until one succeeds).
        """
        with self._flush_lock:
            self._flush_touches()
            with self._lock:
                pages, self._pages = self._pages, []
                links, self._links = self._links, []
                records, self._records = self._records, []
            if not pages and not links:
                return 0
            if not records:
                return self._store(pages, links)
            try:
                self._write_warc(records)
                # the fsync runs beside the store's transaction; the flush (and so the
                # ack) waits for both, so an acknowledged page's record is durable, and
                # a crash before leaves its task unacknowledged: it is fetched again and
                # its row rewritten
                syncing = self._syncer.submit(self.warc.sync)  # type: ignore[union-attr]
                try:
                    n = self._store(pages, links)
                finally:
                    syncing.result()
            except WarcError:
                self._requeue(pages, links, records)
                raise
            return n

    def _requeue(
        self, pages: list[Page], links: list[Link], records: list[tuple[Page, PreparedFetch]]
    ) -> None:
        """Give a batch whose records were not made durable to the next flush, whole."""
        with self._lock:
            self._pages[:0] = pages
            self._links[:0] = links
            self._records[:0] = records

    def _store(self, pages: list[Page], links: list[Link]) -> int:
        """The store's transaction, retried, then page by page (see :meth:`flush`)."""
        for attempt in range(_RETRIES):
            try:
                self.store.save_fetched(pages, links)
                return len(pages)
            except StoreDataError as e:  # refused again however often it is sent
                log.warning("store write refused: %s", e)
                break
            except StoreError as e:
                log.warning("store write failed (attempt %d): %s", attempt + 1, e)
                if attempt < _RETRIES - 1:
                    time.sleep(min(2**attempt * _BACKOFF, 5.0))
            except Exception as e:  # not the store: something in the pages
                log.warning("store write failed: %r", e)
                break
        return self._one_by_one(pages, links)

    def _write_warc(self, records: list[tuple[Page, PreparedFetch]]) -> None:
        """Append the pages' records, durable, and point the pages at them."""
        assert self.warc is not None
        try:
            stored = self.store.stored_payloads([page.fp for page, _f in records])
        except StoreError:
            stored = {}  # unknown: the body is written again, never lost
        groups: list[tuple[bytes, ...]] = []
        kept: list[StoredPayload | None] = []
        for page, fetch in records:
            old = stored.get(page.fp)
            if (
                old is not None
                and old.digest == fetch.digest
                and old.warc_file not in self.warc.abandoned  # its record may be lost
            ):
                revisit = revisit_record(fetch, self._original(old))
                groups.append((fetch.request, revisit))
                kept.append(old)
            else:
                groups.append(fetch.records())
                kept.append(None)
        placed = self.warc.append(groups, durable=False)  # flush() waits for its sync
        for (page, fetch), where, old in zip(records, placed, kept, strict=True):
            if old is None:
                response = where[1]
                page.warc_file, page.warc_offset = response.file, response.offset
                page.warc_length = response.length
                if fetch.conversion:  # the text is in the record after the response
                    page.text, page.text_length = "", where[2].length
            else:  # the body (and text) are where they were: one read still gives each
                page.warc_file, page.warc_offset = old.warc_file, old.warc_offset
                page.warc_length = old.warc_length
                if old.text_length is not None:
                    page.text, page.text_length = "", old.text_length
                self.revisits += 1

    def _original(self, old: StoredPayload) -> Original | None:
        """The record a revisit refers to, read from its file (None when it cannot be)."""
        assert self.warc is not None
        pointer = Pointer(old.warc_file, old.warc_offset, old.warc_length)
        try:
            return original_record(self.warc.storage, pointer)
        except StoreError as e:
            log.warning("revisit of %s: %s", pointer.file, e)
            return None

    def _one_by_one(self, pages: list[Page], links: list[Link]) -> int:
        by_src: dict[int, list[Link]] = {}
        for link in links:
            by_src.setdefault(link[0], []).append(link)
        for i, page in enumerate(pages):
            mine = by_src.get(page.fp, [])
            try:
                self.store.save_fetched([page], mine)
                continue
            except Exception as e:
                refused = e
            bare = dataclasses.replace(page, title="", text="", body=None)
            try:
                self.store.save_fetched([bare], mine)
            except StoreDataError as e:
                self.dropped += 1
                log.error("page %s not stored: %s (then %s)", page.url, refused, e)
                continue
            except StoreError:
                # even a bare page fails, and not for its data: the store is down
                left = pages[i:]
                fps = {p.fp for p in left}
                with self._lock:
                    self._pages[:0] = left
                    self._links[:0] = [link for link in links if link[0] in fps]
                raise
            except Exception as e:
                self.dropped += 1
                log.error("page %s not stored: %r (then %r)", page.url, refused, e)
                continue
            self.stored_bare += 1
            log.error(
                "page %s: the store refused it (%s); stored without its title, text and body",
                page.url,
                refused,
            )
        return len(pages)
