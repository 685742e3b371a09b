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

With a :class:`~srcrawl.warc.output.WarcOutput`, each flush first appends the
batch's WARC records (handed to the OS: every reader sees them), makes them
durable (one fsync), and only then writes the rows that point into them: no row
ever points at a record that a crash of the machine could lose, a page is
acknowledged only after its row, and a crash before leaves its task
unacknowledged, so the page is fetched again. A failed fsync writes no row: the
whole batch waits for the next flush and is written again to a new file. The
fsync runs before the store's transaction rather than beside it (waiting for
it inside the transaction held SQLite's write lock from the other slaves;
docs/benchmarks-journal.md, "Rows only after their records are durable"). A page whose
body the store already holds under the same payload digest gets a revisit
record, and its row keeps pointing at the first one.

With an output in an object store (``SRCRAWL_WARC_DIR=s3://…``) a record is readable only
once its spool file is published as an object, by size or by age (a few seconds), so a
flush appends the batch's records and *holds* its rows: they are written when every
record appended so far is published, and until then :meth:`PageWriter.release` says so
and the runtime acknowledges none of the tasks flushed meanwhile (it keeps them, and
keeps taking new ones). A slave killed in between leaves a spool file no row points
into (discarded at the next start) and tasks that are fetched again; a store that does
not answer holds the rows until it does. Should the spool file fail to be written,
every held record is appended again to a new one.

A recrawl that found a page unchanged (:meth:`PageWriter.touch`) is written in the
same flush, beside its touch: its request record and a revisit naming the stored
page's response record, of the ``server-not-modified`` profile for a 304 and the
``identical-payload-digest`` one for a 200 with the stored body. A 200 whose
text is the stored one but whose body is not (only the markup changed) is
written whole (request, response, conversion), and the touch points the row at
the new records (:data:`~srcrawl.sql.pages.Moved`); its ``fetched_at`` and index
entry stay, as for any touch: the text the index holds has not changed.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence

from srcrawl.core.errors import StoreDataError, StoreError
from srcrawl.sql.pages import Link, Moved, Page, Touch
from srcrawl.sql.store import Store
from srcrawl.sql.warc_pointers import StoredPayload
from srcrawl.warc.output import WarcOutput
from srcrawl.warc.read import original_record
from srcrawl.warc.records import Original, PreparedFetch, not_modified_record, revisit_record
from srcrawl.warc.storage import Pointer, WarcError

log = logging.getLogger("srcrawl.slave")

_RETRIES = 5
_BACKOFF = 0.2  # seconds before the second attempt; doubled each time, at most 5 s


class PageWriter:
    """Pages and links added by any thread, stored by :meth:`flush` in one transaction."""

    def __init__(self, store: Store, warc: WarcOutput | None = None) -> None:
        self.store = store
        self._output = warc
        """Where the records go: it outlives a switch to bodies in the store, for the
        records prepared before it (see :meth:`use_warc`)."""
        self._accepting = warc is not None
        self._pages: list[Page] = []
        self._links: list[Link] = []
        self._records: list[tuple[Page, PreparedFetch]] = []
        self.revisits = 0
        """Fetches written as WARC revisit records (their body was stored already, or a
        304 said it was current)."""
        self._touches: list[Touch] = []
        self._rechecks: list[tuple[int, PreparedFetch]] = []
        """(fp, records) of unchanged recrawls, for the WARC files (see :meth:`touch`)."""
        self._moves: list[Moved] = []
        self._held: _Held = _Held()
        """Rows whose records wait for their object (an output that publishes)."""
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.stored_bare = 0
        """Pages the store refused whole, stored without title, text and body."""
        self.dropped = 0
        """Pages not stored in any form (an error that is not the store's)."""

    @property
    def warc(self) -> WarcOutput | None:
        """The WARC output of the pages added now; None: their bodies go to the store."""
        return self._output if self._accepting else None

    def use_warc(self, on: bool, make: Callable[[], WarcOutput]) -> None:
        """Keep the bodies of pages added from now on in WARC files (``on``; ``make`` gives
        the output the first time) or in the store. Records prepared before a switch to the
        store still go to the output they were made for (parse threads may be preparing
        some as it happens), which stays open until :meth:`close` and is used again when
        WARC output comes back."""
        with self._lock:
            if on and self._output is None:
                self._output = make()
            self._accepting = on

    def close(self) -> None:
        """Close the WARC output (its last records were made durable by their flush)."""
        if self._output is not None:
            self._output.close()

    def add(
        self,
        pages: Sequence[Page],
        links: Sequence[Link],
        records: Sequence[tuple[Page, PreparedFetch]] = (),
    ) -> None:
        """Queue ``pages`` and ``links`` (src, dst, anchor text) for the next :meth:`flush`,
        and the WARC ``records`` of some of those pages."""
        with self._lock:
            self._pages.extend(pages)
            self._links.extend(links)
            self._records.extend(records)

    def touch(
        self, touches: Sequence[Touch], records: Sequence[tuple[int, PreparedFetch]] = ()
    ) -> None:
        """Queue pages found unchanged by a recrawl for the next :meth:`flush`, and the
        WARC ``records`` (fp, fetch) of some of those fetches (see the module docstring)."""
        with self._lock:
            self._touches.extend(touches)
            self._rechecks.extend(records)

    def _flush_touches(self, new: list[Moved]) -> None:
        """Write the queued touches and moves, and the ``new`` moves of this flush (retried
        like pages); StoreError leaves them queued."""
        with self._lock:
            touches, self._touches = self._touches, []
            moves, self._moves = self._moves, []
        if not touches and not moves and not new:
            return
        for attempt in range(_RETRIES):
            try:
                self.store.touch_pages(touches, [*moves, *new])
                return
            except StoreError as e:
                log.warning("store write failed (attempt %d): %s", attempt + 1, e)
                if attempt == _RETRIES - 1:
                    self._keep_touches(touches, [*moves, *new])
                    raise
                time.sleep(min(2**attempt * _BACKOFF, 5.0))

    def _keep_touches(self, touches: list[Touch], moves: list[Moved]) -> None:
        with self._lock:
            self._touches[:0] = touches
            self._moves[:0] = moves

    def flush(self) -> int:
        """Store everything added so far; return the page count.

        One transaction for all; a busy or restarting database is retried a
        few times, then the pages are stored one at a time (see the module
        docstring). Raises StoreError when the store is down: the pages wait
        for the next flush (the runtime acknowledges none of their tasks
        until one succeeds).
        """
        with self._flush_lock:
            with self._lock:
                pages, self._pages = self._pages, []
                links, self._links = self._links, []
                records, self._records = self._records, []
                rechecks, self._rechecks = self._rechecks, []
            if self._output is not None and self._output.storage.publishes:
                return self._flush_held(pages, links, records, rechecks)
            if not records and not rechecks:
                return self._store_all(pages, links)
            try:
                moves = self._write_warc(records, rechecks)
                # durable (one fsync) before any row points at the records: a crash of the
                # machine never leaves a row pointing at a lost record, and a crash before
                # the rows leaves the tasks unacknowledged (fetched again)
                self._output.sync()  # type: ignore[union-attr]
            except WarcError:
                self._requeue(pages, links, records, rechecks)
                raise
            return self._store_all(pages, links, moves)

    def _flush_held(
        self,
        pages: list[Page],
        links: list[Link],
        records: list[tuple[Page, PreparedFetch]],
        rechecks: list[tuple[int, PreparedFetch]],
    ) -> int:
        """Append the records to the spool file, hold the rows with those held already,
        and store them all if everything is published (see :meth:`release`)."""
        held = self._held
        moves: list[Moved] = []
        if records or rechecks:
            try:
                moves = self._write_warc(records, rechecks)
                self._output.sync()  # type: ignore[union-attr]
            except WarcError:
                # the spool file is dropped: every held record is written again, to a new one
                self._requeue(
                    held.pages + pages,
                    held.links + links,
                    held.records + records,
                    held.rechecks + rechecks,
                )
                self._held = _Held()
                raise
        held.pages += pages
        held.links += links
        held.records += records
        held.rechecks += rechecks
        held.moves += moves
        return self._release(final=False)

    def release(self, final: bool = False) -> bool:
        """Publish what is due (``final``: the open spool file too: nothing more comes) and
        store the held rows once all their records are published; whether rows are still
        held (the tasks flushed so far must not be acknowledged yet). Raises StoreError
        when the store is down (the rows are then queued as any unstored page)."""
        with self._flush_lock:
            self._release(final)
            return self.holding

    @property
    def holding(self) -> bool:
        """Whether rows wait for their records' object."""
        return not self._held.empty

    def _release(self, final: bool) -> int:
        out = self._output
        if out is None or not out.storage.publishes:
            return 0
        if not out.publish_due(final=final):
            return 0
        held, self._held = self._held, _Held()
        return self._store_all(held.pages, held.links, held.moves)

    def _store_all(
        self, pages: list[Page], links: list[Link], moves: list[Moved] | None = None
    ) -> int:
        """The touches' transaction, then the pages' (:meth:`_store`). A store down for the
        touches leaves the pages queued too (with their WARC pointers, if any: their
        records are durable)."""
        try:
            self._flush_touches(moves or [])
        except StoreError:
            self._requeue(pages, links, [], [])
            raise
        if not pages and not links:
            return 0
        return self._store(pages, links)

    def _requeue(
        self,
        pages: list[Page],
        links: list[Link],
        records: list[tuple[Page, PreparedFetch]],
        rechecks: list[tuple[int, PreparedFetch]],
    ) -> None:
        """Give a batch whose records were not made durable to the next flush, whole."""
        with self._lock:
            self._pages[:0] = pages
            self._links[:0] = links
            self._records[:0] = records
            self._rechecks[:0] = rechecks

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

    def _write_warc(
        self, records: list[tuple[Page, PreparedFetch]], rechecks: list[tuple[int, PreparedFetch]]
    ) -> list[Moved]:
        """Append the records of the pages and of the unchanged recrawls (handed to the OS:
        :meth:`flush` makes them durable), and point the pages at them; returns the moves
        of the pages written whole again (see :meth:`_moved`)."""
        assert self._output is not None  # records are made only once there is one
        try:
            stored = self.store.stored_payloads(
                [page.fp for page, _f in records] + [fp for fp, _f in rechecks]
            )
        except StoreError:
            stored = {}  # unknown: the body is written again, never lost
        groups: list[tuple[bytes, ...]] = []
        kept: list[StoredPayload | None] = []
        for page, fetch in records:
            old = self._usable(stored.get(page.fp))
            revisit = self._revisit(old, fetch)
            groups.append(fetch.records() if revisit is None else (fetch.request, revisit))
            kept.append(None if revisit is None else old)
        revisits = [self._recheck_records(stored.get(fp), f) for fp, f in rechecks]
        groups.extend(group for group, _revisit in revisits)
        placed = self._output.append(groups, durable=False)  # flush() syncs them
        self._point(records, placed[: len(records)], kept)
        return self._moved(rechecks, placed[len(records) :], [r for _g, r in revisits])

    def _usable(self, old: StoredPayload | None) -> StoredPayload | None:
        """``old``, unless its file was abandoned after a failed write (its record may be
        lost: nothing refers to it)."""
        assert self._output is not None
        return None if old is None or old.warc_file in self._output.abandoned else old

    def _recheck_records(
        self, old: StoredPayload | None, fetch: PreparedFetch
    ) -> tuple[tuple[bytes, ...], bool]:
        """What an unchanged recrawl writes, and whether it is a revisit: its request and a
        revisit of the stored record (a 304, or the same payload), or its records whole
        (another payload)."""
        old = self._usable(old)
        if fetch.not_modified:  # nothing else to write: a 304 has no body
            original = None if old is None else self._original(old)
            return (fetch.request, not_modified_record(fetch, original)), True
        revisit = self._revisit(old, fetch)
        if revisit is not None:
            return (fetch.request, revisit), True
        return fetch.records(), False

    def _revisit(self, old: StoredPayload | None, fetch: PreparedFetch) -> bytes | None:
        """A revisit record naming ``old`` in place of ``fetch``'s response when the store
        holds the same payload there; None: the fetch is written whole. The original's
        head is read only then."""
        if old is None or old.digest != fetch.digest:
            return None
        return revisit_record(fetch, self._original(old))

    def _moved(
        self,
        rechecks: list[tuple[int, PreparedFetch]],
        placed: list[list[Pointer]],
        revisits: list[bool],
    ) -> list[Moved]:
        """Count the rechecks' revisits; the move of each page written whole to its new
        records, for the touches' transaction."""
        moves: list[Moved] = []
        for (fp, fetch), where, revisit in zip(rechecks, placed, revisits, strict=True):
            if revisit:
                self.revisits += 1
                continue
            response = where[1]
            tlen = where[2].length if fetch.conversion else None
            moves.append((fp, response.file, response.offset, response.length, fetch.digest, tlen))
        return moves

    def _point(
        self,
        records: list[tuple[Page, PreparedFetch]],
        placed: list[list[Pointer]],
        kept: list[StoredPayload | None],
    ) -> None:
        """Point each page at its new response record, or (a revisit) at the stored one."""
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
        assert self._output is not None
        pointer = Pointer(old.warc_file, old.warc_offset, old.warc_length)
        try:
            return original_record(self._output.storage, pointer)
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


@dataclasses.dataclass
class _Held:
    """Rows (pages, links, moves) written to a spool file not yet published, and the
    records they point at (appended again should the spool file be lost)."""

    pages: list[Page] = dataclasses.field(default_factory=list)
    links: list[Link] = dataclasses.field(default_factory=list)
    moves: list[Moved] = dataclasses.field(default_factory=list)
    records: list[tuple[Page, PreparedFetch]] = dataclasses.field(default_factory=list)
    rechecks: list[tuple[int, PreparedFetch]] = dataclasses.field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.pages or self.links or self.moves or self.records or self.rechecks)
