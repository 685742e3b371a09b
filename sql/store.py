"""The storage contract and what both backends share.

The SQL schema files next to this module (``sqlite.sql``, ``mysql.sql``) are
the single source of truth for the tables. Every write is batched: one
transaction per batch, ``executemany`` inside it. Statements are constants
written with ``?`` placeholders; the MySQL backend rewrites them to ``%s``.
No statement is ever assembled from user data.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from srcrawl.defaults import DEFAULT_STORE_BATCH, DEFAULT_STORE_BULK_BATCH
from srcrawl.errors import StoreError, StoreTransientError
from srcrawl.sql.retry import Backoff
from srcrawl.sql.warc_text import WarcTexts

if TYPE_CHECKING:
    from srcrawl.sql.database_url import DatabaseURL

SCHEMA_VERSION = "8"
"""8: the index is a Tantivy directory, no postings or doclens tables (a store that has
them is indexed anew once); 7: pages name their WARC file by a number (warc_file_id),
each name kept once in warc_files; 6: pages point into WARC files (warc_file,
warc_offset, warc_length) and keep the body's payload digest, the body itself no longer
in SQL by default, and keep their validators (ETag, Last-Modified), a digest of what the
index sees, their revisit interval and next fetch time (recrawl); 5: links carry their
anchor text (indexed by dst), the index holds title, body and anchor text as fields; 4:
pages record a failed fetch's error and whether the body is complete; 3: terms known by
their fingerprints, no terms table; 2: postings packed per (term, merge block), terms
numbered in a terms table; 1: a row per (term, page)."""
RANK_MEAN = "rank_mean"
"""Meta key: the mean PageRank score of the ranked pages, written with the scores (absent
while no page is ranked), so a search reads the two in one snapshot."""
T = TypeVar("T")
TABLES = ("meta", "pages", "warc_files", "links", "ranks", "jobs")
OLD_INDEX_TABLES = ("doclens", "postings", "terms")
"""The tables of the index schemas 1 to 7 kept in SQL."""
OLD_INDEX_META = (
    "index_docs",
    "index_length",
    "index_title_length",
    "index_anchor_length",
    "index_block",
)


def compress_body(raw: bytes) -> bytes:
    """The stored form of a raw response body."""
    return zlib.compress(raw, 6)


def decompress_body(stored: bytes | None) -> bytes:
    return zlib.decompress(stored) if stored else b""


Link = tuple[int, int] | tuple[int, int, str | None]
"""A stored link: (source fp, target fp) or (source fp, target fp, anchor text or None)."""

MAX_ANCHORS_PER_PAGE = 200
"""Anchor texts of links to one page read for its anchor field (a page every page of a
site links to would otherwise bring one per page)."""

MAX_TITLE_CHARS = 4_000
"""Characters of a title stored (MySQL's TEXT holds 65,535 bytes: 4 bytes a character)."""
MAX_CONTENT_TYPE_CHARS = 255
"""Characters of a Content-Type stored (the column is VARCHAR(255))."""


@dataclass
class RankSnapshot:
    """The mean PageRank score (None: no page is ranked) and the pages' scores, read in
    one transaction (see :meth:`Store.rank_snapshot`)."""

    store: Store
    cur: Any
    mean: float | None

    def scores(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> PageRank score of the ranked pages among ``fps``."""
        rows = self.store._select_in(self.cur, "SELECT fp, score FROM ranks WHERE fp IN ({})", fps)
        return {int(fp): float(score) for fp, score in rows}


@dataclass
class Page:
    """One fetched URL as stored: keyed by the fingerprint of its canonical URL."""

    fp: int
    url: str
    host: str
    depth: int = 0
    status: int = 0
    content_type: str = ""
    fetched_at: float = 0.0
    fetch_ms: int = 0
    title: str = ""
    text: str = ""
    body: bytes | None = None  # compressed with compress_body
    error: str | None = None
    """Why the fetch failed (an ``ERROR_*`` name of slave.fetch), None when it did not."""
    body_state: str = "complete"
    """complete, capped (cut at the crawl's page size cap), incomplete (the transfer failed
    part way) or none (no response): only complete and capped bodies are indexed."""
    warc_file: str | None = None
    """The WARC file holding the page's response record: a name under the WARC directory
    (``job/….warc.gz``) or, for an imported archive, an absolute path; None: no record."""
    warc_offset: int | None = None
    """Byte offset of the (gzip member of the) response record in ``warc_file``."""
    warc_length: int | None = None
    """Bytes of that record as stored: one seek and one read give the page's body."""
    payload_digest: str | None = None
    """``sha1:BASE32`` of the body (the WARC-Payload-Digest), None when not recorded."""
    text_length: int | None = None
    """Bytes of the WARC ``conversion`` record holding the extracted text, which follows the
    response record (at ``warc_offset + warc_length``); None: the text is in ``text``."""
    etag: str | None = None
    last_modified: str | None = None
    """The response's validators, sent back on the page's next fetch (a conditional GET)."""
    digest: int | None = None
    """Fingerprint of what the index sees (title and extracted text): whether the page
    changed between two fetches (see slave/revisit.py)."""
    revisit: float | None = None
    """Seconds from this fetch to the next (the page's adaptive interval)."""
    next_fetch: float | None = None
    """When the page is due again (epoch seconds); the master's schedule is in Redis."""
    checked_at: float | None = None
    """When a fetch last found the page unchanged (None: not since ``fetched_at``);
    ``fetched_at`` stays the fetch time of the stored version (the index's version stamp)."""

    def row(self, warc_file_id: int | None = None) -> tuple:
        """The row UPSERT_PAGE writes; ``warc_file_id`` numbers ``warc_file`` (see
        :meth:`Store._warc_file_ids`)."""
        # a hostile page's title or header is cut to what every backend's
        # column holds: refused, it would fail its whole batch on every retry
        return (
            self.fp,
            self.url,
            self.host,
            self.depth,
            self.status,
            self.content_type[:MAX_CONTENT_TYPE_CHARS],
            self.fetched_at,
            self.fetch_ms,
            self.title[:MAX_TITLE_CHARS],
            self.text,
            self.body,
            self.error,
            self.body_state,
            warc_file_id,
            self.warc_offset,
            self.warc_length,
            self.payload_digest,
            self.text_length,
            _cut(self.etag, MAX_VALIDATOR_CHARS),
            _cut(self.last_modified, MAX_VALIDATOR_CHARS),
            self.digest,
            self.revisit,
            self.next_fetch,
            self.checked_at,
        )


def _cut(value: str | None, chars: int) -> str | None:
    return None if value is None else value[:chars]


MAX_VALIDATOR_CHARS = 255
"""Characters of an ETag or Last-Modified stored (VARCHAR(255)): a longer one is cut,
which at worst costs the page a full fetch instead of a 304."""

Touch = tuple[int, float, int, str | None, str | None, float, float]
"""A page fetched again and found unchanged: (fp, checked_at, fetch_ms, etag,
last_modified, revisit, next_fetch); its text, body, fetched_at and index entry stay."""

Moved = tuple[int, str, int, int, str, int | None]
"""A page a recrawl found unchanged in its text but not in its body (only its markup
changed), whose fetch was written to the WARC files whole: (fp, warc_file, warc_offset,
warc_length, payload_digest, text_length) of the new response record (and the
conversion record after it); :meth:`Store.touch_pages` points the row at them."""


WARC_NAME = "(SELECT name FROM warc_files WHERE id = pages.warc_file_id)"
"""A pages row's WARC file by name (in a statement reading ``FROM pages``, not aliased):
a primary key lookup per row, so readers see names as they did when rows held them."""
PAGE_COLUMNS = (
    "fp, url, host, depth, status, content_type, fetched_at, fetch_ms, title, text, body, "
    f"error, body_state, {WARC_NAME}, warc_offset, warc_length, payload_digest, text_length, "
    "etag, last_modified, digest, revisit, next_fetch, checked_at"
)
WARC_COLUMNS = ("warc_file_id", "warc_offset", "warc_length", "payload_digest", "text_length")
"""The columns schemas 6 and 7 add to pages for WARC storage (see ``Store.ADD_WARC``)."""
REVISIT_COLUMNS = ("etag", "last_modified", "digest", "revisit", "next_fetch", "checked_at")
"""The columns schema 6 adds to pages for the recrawl (see ``Store.ADD_REVISIT``)."""
_TEXT_COLUMNS = f"text, {WARC_NAME}, warc_offset, warc_length, text_length"
"""What :meth:`Store._text` reads a page's text from."""
GONE = "(status IN (404, 410) OR (status >= 300 AND status < 400))"
"""Pages that are not there (any more): not found, gone, or now a redirect."""
INDEXABLE = f"error IS NULL AND body_state IN ('complete', 'capped') AND NOT {GONE}"
"""The pages whose text is indexed: fetched without an error, their body whole or capped,
and there (a page that went away leaves the index at its next pass)."""


@dataclass(frozen=True)
class StoredPayload:
    """Where a stored page's body is (see :meth:`Store.stored_payloads`)."""

    digest: str
    warc_file: str
    warc_offset: int
    warc_length: int
    text_length: int | None = None
    """Bytes of the conversion record after the response record; None: no text there."""


RETIRED_INDEXES = (("links", "links_dst"),)
"""(table, index) pairs older schemas had and this one drops."""

log = logging.getLogger("srcrawl.store")


def schema_statements(dialect: str) -> list[str]:
    """The statements of a schema file, split on ``;`` at the end of a line."""
    text = resources.files("srcrawl.sql").joinpath(f"{dialect}.sql").read_text("utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    statements, current = [], []
    for line in lines:
        current.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(current).strip().rstrip(";"))
            current = []
    if "".join(current).strip():
        statements.append("\n".join(current).strip())
    return [s for s in statements if s]


def _chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class Store(ABC):
    """One storage contract; :class:`SQLiteStore` and :class:`MySQLStore` implement it."""

    dialect: str
    batch_size: int = DEFAULT_STORE_BATCH
    backoff: Backoff = Backoff()
    """How a transaction that failed for a passing reason is run again (``sql/retry.py``)."""
    warc_texts: WarcTexts | None = None
    """Where page texts kept in WARC files are read (see :func:`open_store`)."""

    # statements that differ by dialect
    UPSERT_PAGE: str
    INSERT_LINK: str  # (src, dst, anchor text or None)
    ADD_LINK_ANCHOR: str  # links of schema 4 and before get anchor (and MySQL links_to)
    UPSERT_JOB: str
    UPSERT_META: str
    ADD_FETCH_OUTCOME: tuple[str, ...]  # pages of schema 3 and before get error, body_state
    ADD_WARC: tuple[tuple[str, str], ...]  # (column of WARC_COLUMNS, the statement adding it)
    ADD_REVISIT: tuple[str, ...]  # pages of schema 5 and before get REVISIT_COLUMNS
    INSERT_WARC_FILE: str  # (name): numbers a WARC file unless it has its number already
    WARC_FILE_ID: str  # (name): the number of a WARC file, the latest committed one
    MOVE_WARC_NAMES: tuple[str, ...]  # schema 6: warc_file names into warc_files and ids

    def __init__(self) -> None:
        # one connection per store; threads of one process take turns
        self._lock = threading.RLock()
        self._warc_ids: dict[str, int] = {}
        """WARC file name -> its warc_files.id, of numbers committed (ids never change, and
        a slave writes thousands of rows into one file: one look-up per file, not per row)."""

    # -- connection plumbing, per backend --------------------------------
    @abstractmethod
    def _begin(self) -> Any:
        """Start a transaction and return a cursor."""

    def _begin_read(self) -> Any:
        """Start a transaction that only reads; backends may avoid the write lock."""
        return self._begin()

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def _rollback(self) -> None: ...

    @abstractmethod
    def _sql(self, statement: str) -> str:
        """The statement in this backend's placeholder style."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def size_bytes(self) -> int:
        """Bytes the store takes on its server or disk (what ``status`` shows)."""

    @abstractmethod
    def _translate_error(self, e: Exception) -> Exception | None:
        """A StoreError for a driver error, or None if ``e`` is not one."""

    @contextlib.contextmanager
    def transaction(self, *, read_only: bool = False) -> Iterator[Any]:
        """A cursor inside one transaction: committed on success, rolled back on error.

        ``read_only`` transactions take no write lock where the backend allows
        it (SQLite), so readers never wait for a writer.
        """
        with self._lock:
            try:
                cur = self._begin_read() if read_only else self._begin()
            except Exception as e:
                err = self._translate_error(e)
                if err is None:
                    raise
                raise err from e
            try:
                yield cur
                self._commit()
            except BaseException as e:
                with contextlib.suppress(Exception):
                    self._rollback()
                err = self._translate_error(e) if isinstance(e, Exception) else None
                if err is None:
                    raise
                raise err from e
            finally:
                with contextlib.suppress(Exception):
                    cur.close()

    def run(self, work: Callable[[Any], T], *, read_only: bool = False) -> T:
        """``work(cursor)`` in one transaction, committed; returns what it returns.

        A transaction the server fails for a passing reason (StoreTransientError:
        deadlock, snapshot conflict, lock wait timeout, lost connection) is rolled back
        and ``work`` runs again whole, in a new transaction, after a jittered back-off
        (``sql/retry.py``). So ``work`` must compute its writes from what it reads in
        its transaction and from its arguments only, and change nothing outside the
        store that a second run would change again.
        """
        failed = 0
        while True:
            try:
                with self.transaction(read_only=read_only) as cur:
                    return work(cur)
            except StoreTransientError as e:
                failed += 1
                if failed >= self.backoff.tries:
                    raise
                wait = self.backoff.wait(failed)
                log.warning(
                    "%s; the transaction runs again in %.2f s (run %d of %d)",
                    e,
                    wait,
                    failed + 1,
                    self.backoff.tries,
                )
            time.sleep(wait)  # outside the transaction and the lock: other threads go on

    def _execute(self, cur: Any, statement: str, params: Sequence[Any] = ()) -> Any:
        cur.execute(self._sql(statement), tuple(params))
        return cur

    def _executemany(self, cur: Any, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            cur.executemany(self._sql(statement), rows)

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self.run(lambda cur: list(self._execute(cur, statement, params).fetchall()))

    # -- schema --------------------------------------------------------------
    def init_schema(self) -> None:
        """Create every table that is missing and migrate an older schema; safe to run any
        number of times, and by many processes at once (see :meth:`_schema_lock`)."""
        with self._schema_lock():
            self.run(self._create_schema)

    def _schema_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while the schema is created or migrated: one process does it while the
        others wait, then find it done. SQLite's write transaction is lock enough."""
        return contextlib.nullcontext()

    def _create_schema(self, cur: Any) -> None:
        # idempotent as a whole: MySQL commits each DDL statement on its own, so a run
        # cut short (or run again after a passing error) finishes what is left
        if self._old_index_layout(cur):
            self._drop_old_index(cur)
        pages = self._add_columns(cur)
        for statement in schema_statements(self.dialect):
            cur.execute(statement)
        self._retire_indexes(cur)
        if "warc_file" in pages:  # schema 6: each row named its WARC file
            for statement in self.MOVE_WARC_NAMES:
                self._execute(cur, statement)
        if not self._execute(cur, "SELECT 1 FROM meta WHERE k = ?", (RANK_MEAN,)).fetchone():
            self._write_rank_mean(cur)  # ranked before the mean was kept beside the scores
        self._execute(cur, self.UPSERT_META, ("schema_version", SCHEMA_VERSION))

    def _add_columns(self, cur: Any) -> set[str]:
        """Add the columns that pages and links of an older schema lack; returns the
        columns pages had (none: no pages table yet)."""
        pages = self._columns(cur, "pages")
        if pages and "error" not in pages:  # schema 3 and before: no fetch outcome
            for statement in self.ADD_FETCH_OUTCOME:
                self._execute(cur, statement)
        # schema 5 and before: bodies in SQL only; early schema 6: text in SQL only;
        # schema 6: WARC files by name, not number
        for column, statement in self.ADD_WARC if pages else ():
            if column not in pages:
                self._execute(cur, statement)
        if pages and "next_fetch" not in pages:  # schema 5 and before: no recrawl
            for statement in self.ADD_REVISIT:
                self._execute(cur, statement)
        links = self._columns(cur, "links")
        if links and "anchor" not in links:  # schema 4 and before: no anchor text
            self._execute(cur, self.ADD_LINK_ANCHOR)
        return pages

    def _old_index_layout(self, cur: Any) -> bool:
        """Whether the store still holds an index in SQL (schema 7 and before).

        The tables are dropped last, each DROP committed by MySQL on its own,
        so a migration cut short is done again at the next start.
        """
        return any(self._columns(cur, table) for table in OLD_INDEX_TABLES)

    @abstractmethod
    def _retire_indexes(self, cur: Any) -> None:
        """Drop the indexes of RETIRED_INDEXES that a store made by an older version has."""

    def _drop_old_index(self, cur: Any) -> None:
        """Drop the index tables of schema 7 and before: the pages are marked unindexed,
        and the next ``srcrawl index`` builds the Tantivy index anew."""
        log.warning(
            "the store holds an index in SQL tables, from before the index moved to Tantivy: "
            "the tables were dropped and every page marked unindexed; run `srcrawl index` "
            "to index them anew"
        )
        # Pages first, then the tables: MySQL commits before each DROP, so a crash in
        # between leaves pages marked unindexed and a table, which makes the next start
        # finish this.
        self._execute(cur, "UPDATE pages SET indexed_at = NULL")
        self._select_in(cur, "DELETE FROM meta WHERE k IN ({})", OLD_INDEX_META)
        for table in OLD_INDEX_TABLES:
            self._execute(cur, f"DROP TABLE IF EXISTS {table}")

    @abstractmethod
    def _columns(self, cur: Any, table: str) -> set[str]:
        """The column names of ``table`` (empty if there is no such table)."""

    def schema_version(self) -> str | None:
        rows = self._query("SELECT v FROM meta WHERE k = ?", ("schema_version",))
        return rows[0][0] if rows else None

    # -- pages and links -----------------------------------------------------
    def save_fetched(self, pages: Sequence[Page], links: Sequence[Link]) -> None:
        """Store fetched pages and their out-links in one transaction per batch.

        A link is (src, dst) or (src, dst, anchor text or None). A page
        fetched again replaces its row and its out-links, and is marked for
        indexing again; nothing is ever doubled.
        """
        srcs = [(p.fp,) for p in pages]
        rows = _link_rows(links)

        def write(cur: Any) -> dict[str, int]:
            new = self._write_pages(cur, pages)
            self._executemany(cur, "DELETE FROM links WHERE src = ?", srcs)
            self._executemany(cur, self.INSERT_LINK, rows)
            return new

        self._warc_ids.update(self.run(write))  # committed: the numbers are there for good

    def _write_pages(self, cur: Any, pages: Sequence[Page]) -> dict[str, int]:
        """Upsert ``pages`` in ``cur``'s transaction; returns the WARC files numbered for
        them that :attr:`_warc_ids` lacks, which the caller adds once it has committed (SQLite
        gives the number of a row rolled back to the next file numbered)."""
        ids, new = self._numbered(cur, {p.warc_file for p in pages})
        rows = [p.row(None if p.warc_file is None else ids[p.warc_file]) for p in pages]
        self._executemany(cur, self.UPSERT_PAGE, rows)
        return new

    def _numbered(self, cur: Any, names: set[str | None]) -> tuple[dict[str, int], dict[str, int]]:
        """(name -> number of every known WARC file and of ``names``, the numbers of those
        new to :attr:`_warc_ids`, given in ``cur``'s transaction): one look-up per new file."""
        new = self._warc_file_ids(cur, names - self._warc_ids.keys())
        return (self._warc_ids | new if new else self._warc_ids), new

    def _warc_file_ids(self, cur: Any, names: set[str | None]) -> dict[str, int]:
        """name -> warc_files.id of ``names``, numbering the new ones in ``cur``'s transaction.

        INSERT-or-ignore, then a read of the latest committed row: two writers
        numbering one name at once both get the one number (MySQL's reader would
        otherwise see its transaction's snapshot, which may predate the other's insert).
        """
        ids: dict[str, int] = {}
        for name in names:
            if name is not None:
                self._execute(cur, self.INSERT_WARC_FILE, (name,))
                ids[name] = int(self._execute(cur, self.WARC_FILE_ID, (name,)).fetchone()[0])
        return ids

    def stored_payloads(self, fps: Sequence[int]) -> dict[int, StoredPayload]:
        """fp -> the stored WARC record and payload digest of the pages among ``fps`` that
        have one (a page fetched again with the same digest gets a revisit record)."""
        rows = self.run(
            lambda cur: self._select_in(
                cur,
                f"SELECT fp, payload_digest, {WARC_NAME}, warc_offset, warc_length, "
                "text_length FROM pages WHERE fp IN ({}) AND payload_digest IS NOT NULL "
                "AND warc_file_id IS NOT NULL",
                list(fps),
            ),
            read_only=True,
        )
        return {
            int(fp): StoredPayload(
                digest, wfile, int(off), int(length), None if tlen is None else int(tlen)
            )
            for fp, digest, wfile, off, length, tlen in rows
        }

    def warc_files(self) -> list[str]:
        """The WARC files the stored pages point into, by name."""
        sql = "SELECT name FROM warc_files WHERE id IN (SELECT warc_file_id FROM pages)"
        rows = self._query(sql + " ORDER BY name")
        return [r[0] for r in rows]

    def touch_pages(self, touches: Sequence[Touch], moved: Sequence[Moved] = ()) -> None:
        """Record fetches that found pages unchanged (a 304, or the same digest): the time
        of the check, validators and schedule move; text, body, ``fetched_at`` and index
        entry stay, and the page is not marked for indexing again (a merge of its text
        under way is not made stale either: it checks ``fetched_at``).

        The ``moved`` pages (:data:`Moved`) point at their new WARC records in the same
        transaction: the same text, read from the new conversion record, so still no
        new index entry."""

        def write(cur: Any) -> dict[str, int]:
            self._executemany(
                cur,
                "UPDATE pages SET checked_at = ?, fetch_ms = ?, etag = COALESCE(?, etag), "
                "last_modified = COALESCE(?, last_modified), revisit = ?, next_fetch = ? "
                "WHERE fp = ?",
                [(*t[1:], t[0]) for t in touches],
            )
            if not moved:
                return {}
            ids, new = self._numbered(cur, {m[1] for m in moved})
            # the text moves to the new conversion record (when there is one); a body
            # kept in the row before (--body-store sql) is the old one: dropped
            self._executemany(
                cur,
                "UPDATE pages SET warc_file_id = ?, warc_offset = ?, warc_length = ?, "
                "payload_digest = ?, text_length = ?, text = COALESCE(?, text), "
                "body = NULL WHERE fp = ?",
                [
                    (ids[f], off, length, digest, tlen, None if tlen is None else "", fp)
                    for fp, f, off, length, digest, tlen in moved
                ],
            )
            return new

        self._warc_ids.update(self.run(write))  # committed: the numbers are there for good

    @contextlib.contextmanager
    def bulk_load(self) -> Iterator[Store]:
        """Tune this store for writing many rows (imports, benchmarks) until the block ends.

        ``put_pages`` and ``put_links`` then write much larger batches per
        transaction, and the backend may relax settings that cost time per
        write (see ``_bulk_settings``); everything returns to normal after.
        """
        saved = self.batch_size
        self.batch_size = DEFAULT_STORE_BULK_BATCH
        try:
            with self._bulk_settings():
                yield self
        finally:
            self.batch_size = saved

    def _bulk_settings(self) -> contextlib.AbstractContextManager[None]:
        """Backend settings for :meth:`bulk_load` (none by default)."""
        return contextlib.nullcontext()

    def put_pages(self, pages: Iterable[Page]) -> int:
        n = 0
        for batch in _chunks(pages, self.batch_size):
            self._warc_ids.update(self.run(lambda cur, b=batch: self._write_pages(cur, b)))
            n += len(batch)
        return n

    def set_depths(self, depths: Iterable[tuple[int, int]]) -> int:
        """Set the depth of stored pages: (fp, depth) pairs; pages not stored are skipped."""
        n = 0
        for batch in _chunks(depths, self.batch_size):
            rows = [(d, fp) for fp, d in batch]
            self.run(
                lambda cur, r=rows: self._executemany(
                    cur, "UPDATE pages SET depth = ? WHERE fp = ?", r
                )
            )
            n += len(batch)
        return n

    def put_links(self, links: Iterable[Link]) -> int:
        """Add links (source fp, target fp[, anchor]); links already present are ignored."""
        n = 0
        for batch in _chunks(links, self.batch_size * 10):
            rows = _link_rows(batch)
            self.run(lambda cur, r=rows: self._executemany(cur, self.INSERT_LINK, r))
            n += len(batch)
        return n

    def get_pages(self, fps: Sequence[int], *, with_body: bool = False) -> list[Page]:
        """The stored pages among ``fps`` (in no particular order)."""
        out: list[Page] = []
        cols = PAGE_COLUMNS if with_body else PAGE_COLUMNS.replace(", body,", ", NULL,")
        for batch in _chunks(fps, 500):
            marks = ", ".join("?" * len(batch))
            # only the number of placeholders is built here, never data
            rows = self._query(f"SELECT {cols} FROM pages WHERE fp IN ({marks})", batch)
            out.extend(Page(*_page_row(r)) for r in rows)
        return out

    def iter_pages(self, *, batch: int = 1000, with_body: bool = False) -> Iterator[Page]:
        """Every stored page in fingerprint order, read in keyset-paginated batches."""
        cols = PAGE_COLUMNS if with_body else PAGE_COLUMNS.replace(", body,", ", NULL,")
        last: int | None = None
        while True:
            if last is None:
                rows = self._query(f"SELECT {cols} FROM pages ORDER BY fp LIMIT ?", (batch,))
            else:
                rows = self._query(
                    f"SELECT {cols} FROM pages WHERE fp > ? ORDER BY fp LIMIT ?", (last, batch)
                )
            if not rows:
                return
            for r in rows:
                yield Page(*_page_row(r))
            last = rows[-1][0]

    def iter_page_hosts(self, *, batch: int = 100_000) -> Iterator[list[tuple[int, str]]]:
        """(fp, host) of every stored page, in fingerprint order, a batch at a time."""
        last: int | None = None
        while True:
            if last is None:
                rows = self._query("SELECT fp, host FROM pages ORDER BY fp LIMIT ?", (batch,))
            else:
                rows = self._query(
                    "SELECT fp, host FROM pages WHERE fp > ? ORDER BY fp LIMIT ?", (last, batch)
                )
            if not rows:
                return
            yield [(int(fp), host) for fp, host in rows]
            last = int(rows[-1][0])

    def iter_links(self, *, batch: int = 100_000) -> Iterator[list[tuple[int, int]]]:
        """Every link as (src, dst), in (src, dst) order, a batch at a time."""
        last: tuple[int, int] | None = None
        while True:
            if last is None:
                rows = self._query("SELECT src, dst FROM links ORDER BY src, dst LIMIT ?", (batch,))
            else:
                rows = self._query(
                    # `src >= ?` first: SQLite scans the whole table for a bare OR
                    "SELECT src, dst FROM links WHERE src >= ? AND (src > ? OR dst > ?) "
                    "ORDER BY src, dst LIMIT ?",
                    (last[0], last[0], last[1], batch),
                )
            if not rows:
                return
            yield [(int(a), int(b)) for a, b in rows]
            last = (int(rows[-1][0]), int(rows[-1][1]))

    def iter_link_urls(self, *, batch: int = 50_000) -> Iterator[tuple[str, str]]:
        """(source URL, target URL) of every link whose both ends are stored pages."""
        sql = (
            "SELECT s.url, d.url FROM links l JOIN pages s ON s.fp = l.src "
            "JOIN pages d ON d.fp = l.dst WHERE l.src IN ({}) ORDER BY l.src, l.dst"
        )
        srcs: list[int] = []
        for page in self.iter_pages(batch=batch):
            srcs.append(page.fp)
            if len(srcs) >= 500:
                yield from self._query(sql.format(", ".join("?" * len(srcs))), srcs)
                srcs = []
        if srcs:
            yield from self._query(sql.format(", ".join("?" * len(srcs))), srcs)

    def anchor_texts(
        self, dsts: Sequence[int], *, per_page: int = MAX_ANCHORS_PER_PAGE
    ) -> dict[int, list[str]]:
        """dst -> the anchor texts of links from other pages to it, at most ``per_page`` each
        (in source order), for the pages ``dsts`` (read by the links_to index)."""
        out: dict[int, list[str]] = {}
        rows = self.run(
            lambda cur: self._select_in(
                cur,
                "SELECT dst, src, anchor FROM links WHERE dst IN ({}) AND anchor IS NOT NULL "
                "ORDER BY dst, src",
                list(dsts),
            ),
            read_only=True,
        )
        for dst, src, anchor in rows:
            texts = out.setdefault(int(dst), [])
            if int(src) != int(dst) and len(texts) < per_page:
                texts.append(anchor)
        return out

    def host_texts(self, host: str, limit: int) -> list[str]:
        """The text of up to ``limit`` indexable pages of ``host`` (the first by fingerprint)."""
        rows = self._query(
            f"SELECT {_TEXT_COLUMNS} FROM pages WHERE host = ? AND {INDEXABLE} ORDER BY fp LIMIT ?",
            (host, limit),
        )
        return [self._text(r) for r in rows]

    def page_text(self, page: Page) -> str:
        """The extracted text of a stored page: its row's, or its WARC conversion record's."""
        return self._text(
            (page.text, page.warc_file, page.warc_offset, page.warc_length, page.text_length)
        )

    def _text(self, r: Sequence[Any]) -> str:
        """The page text of a row of :data:`_TEXT_COLUMNS`: in the row, or in its WARC file."""
        text, wfile, woffset, wlength, tlength = r
        if tlength is None or wfile is None:
            return text
        if self.warc_texts is None:
            raise StoreError(f"page text in WARC file {wfile}, but no WARC directory is known")
        return self.warc_texts.read(wfile, int(woffset) + int(wlength), int(tlength))

    def has_rows(self, table: str) -> bool:
        """Whether one of the schema's tables holds a row (one index look-up, not a count)."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        return bool(self._query(f"SELECT 1 FROM {table} LIMIT 1"))

    def count(self, table: str) -> int:
        """Row count of one of the schema's tables."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        return int(self._query(f"SELECT COUNT(*) FROM {table}")[0][0])

    # -- ranks ---------------------------------------------------------------
    def replace_ranks(self, ranks: Iterable[tuple[int, float]]) -> int:
        """Replace the whole rank table in one transaction; returns the rows written.

        ``ranks`` is read once per run of the transaction: an iterator is read into a
        list first, so a run after a passing error writes every score again."""
        rows = list(ranks) if isinstance(ranks, Iterator) else ranks

        def write(cur: Any) -> int:
            n = 0
            self._execute(cur, "DELETE FROM ranks")
            for batch in _chunks(rows, self.batch_size * 20):
                self._executemany(cur, "INSERT INTO ranks (fp, score) VALUES (?, ?)", batch)
                n += len(batch)
            self._write_rank_mean(cur)
            return n

        return self.run(write)

    def _write_rank_mean(self, cur: Any) -> None:
        """:data:`RANK_MEAN` of the scores in the rank table, in ``cur``'s transaction."""
        (mean,) = self._execute(cur, "SELECT AVG(score) FROM ranks").fetchone()
        if mean is None:
            self._execute(cur, "DELETE FROM meta WHERE k = ?", (RANK_MEAN,))
        else:
            self._execute(cur, self.UPSERT_META, (RANK_MEAN, repr(float(mean))))

    def top_ranks(self, limit: int | None = None) -> list[tuple[str, float]]:
        """(url, rank) of ranked pages, highest rank first."""
        sql = "SELECT p.url, r.score FROM ranks r JOIN pages p ON p.fp = r.fp ORDER BY r.score DESC"
        if limit is None:
            return [(u, float(s)) for u, s in self._query(sql)]
        return [(u, float(s)) for u, s in self._query(sql + " LIMIT ?", (limit,))]

    # -- index -----------------------------------------------------------------
    def _select_in(
        self, cur: Any, statement: str, values: Sequence[Any], head: Sequence[Any] = ()
    ) -> list[tuple]:
        """Rows of ``statement`` (with one ``{}`` for the IN list) over ``values`` in chunks."""
        out: list[tuple] = []
        for i in range(0, len(values), 500):
            part = list(values[i : i + 500])
            # only the number of placeholders is built here, never data
            self._execute(cur, statement.format(", ".join("?" * len(part))), [*head, *part])
            out.extend(cur.fetchall())
        return out

    def unindexed_pages(self, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` fingerprints of pages unindexed since their last fetch, after ``after``.

        Only pages whose fetch gave a usable body (see :data:`INDEXABLE`).

        In fingerprint order, so a caller pages through them with the last one it got.
        """
        if after is None:
            sql, params = (
                f"SELECT fp FROM pages WHERE indexed_at IS NULL AND {INDEXABLE} "
                "ORDER BY fp LIMIT ?",
                (limit,),
            )
        else:
            sql = (
                f"SELECT fp FROM pages WHERE indexed_at IS NULL AND {INDEXABLE} "
                "AND fp > ? ORDER BY fp LIMIT ?"
            )
            params = (after, limit)
        rows = self.run(lambda cur: self._execute(cur, sql, params).fetchall(), read_only=True)
        return [int(r[0]) for r in rows]

    def unindexable_unmarked(self, limit: int) -> list[int]:
        """Up to ``limit`` fingerprints of pages fetched since their last index pass that
        are not indexable (gone, a redirect, an error): the index deletes their documents
        (if it has them) and then marks them with :meth:`settle_unindexable`."""
        rows = self.run(
            lambda cur: self._execute(
                cur,
                f"SELECT fp FROM pages WHERE indexed_at IS NULL AND NOT ({INDEXABLE}) "
                "ORDER BY fp LIMIT ?",
                (limit,),
            ).fetchall(),
            read_only=True,
        )
        return [int(r[0]) for r in rows]

    def settle_unindexable(self, fps: Sequence[int], done_at: float) -> int:
        """Mark the pages ``fps`` done at ``done_at`` if they are still unmarked and not
        indexable (a page stored anew meanwhile is left to the index); they are unmarked
        when fetched again (the page upsert). Returns how many were marked."""

        def settle(cur: Any) -> int:
            marked = 0
            for i in range(0, len(fps), 500):
                part = list(fps[i : i + 500])
                done = self._execute(
                    cur,
                    f"UPDATE pages SET indexed_at = ? WHERE fp IN ({', '.join('?' * len(part))}) "
                    f"AND indexed_at IS NULL AND NOT ({INDEXABLE})",
                    [done_at, *part],
                )
                marked += max(done.rowcount, 0)
            return marked

        return self.run(settle)

    def mark_indexed(self, versions: Sequence[tuple[int, float]], indexed_at: float) -> int:
        """Mark pages indexed, each only if its ``fetched_at`` is still the one that was
        indexed: a page fetched again meanwhile stays unmarked, for the next pass.
        ``versions``: (fp, fetched_at). Returns how many were asked for."""

        def mark(cur: Any) -> int:
            marked = 0
            for i in range(0, len(versions), DEFAULT_STORE_BATCH):
                rows = [(indexed_at, fp, at) for fp, at in versions[i : i + DEFAULT_STORE_BATCH]]
                self._executemany(
                    cur, "UPDATE pages SET indexed_at = ? WHERE fp = ? AND fetched_at = ?", rows
                )
                marked += len(rows)
            return marked

        return self.run(mark)

    def fetched_at(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> fetched_at of the stored pages among ``fps``."""
        rows = self.run(
            lambda cur: self._select_in(
                cur, "SELECT fp, fetched_at FROM pages WHERE fp IN ({})", fps
            ),
            read_only=True,
        )
        return {int(fp): float(at) for fp, at in rows}

    def indexed_pages(self) -> int:
        """Pages the index holds as of their last fetch (indexable and marked)."""
        row = self.run(
            lambda cur: self._execute(
                cur, f"SELECT COUNT(*) FROM pages WHERE indexed_at IS NOT NULL AND {INDEXABLE}"
            ).fetchone(),
            read_only=True,
        )
        return int(row[0])

    def index_documents(self, fps: Sequence[int]) -> list[tuple[int, float, str, str, str]]:
        """(fp, fetched_at, url, title, text) of the stored pages among ``fps``, any order."""
        rows = self.run(
            lambda cur: self._select_in(
                cur,
                f"SELECT fp, fetched_at, url, title, {_TEXT_COLUMNS} FROM pages WHERE fp IN ({{}})",
                fps,
            ),
            read_only=True,
        )
        # texts in WARC files are read after the transaction: no lock held meanwhile
        return [(int(r[0]), float(r[1]), r[2], r[3], self._text(r[4:])) for r in rows]

    def page_ranks(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> PageRank score of the ranked pages among ``fps``."""
        rows = self.run(
            lambda cur: self._select_in(cur, "SELECT fp, score FROM ranks WHERE fp IN ({})", fps),
            read_only=True,
        )
        return {int(fp): float(score) for fp, score in rows}

    def rank_mean(self) -> float | None:
        """The mean PageRank score, or None when no page is ranked."""
        return self.run(self._rank_mean, read_only=True)

    def _rank_mean(self, cur: Any) -> float | None:
        row = self._execute(cur, "SELECT v FROM meta WHERE k = ?", (RANK_MEAN,)).fetchone()
        return None if row is None else float(row[0])

    @contextlib.contextmanager
    def rank_snapshot(self) -> Iterator[RankSnapshot]:
        """The ranks as one read transaction sees them: a rank run replacing the scores
        meanwhile is seen whole or not at all, never its scores with the old mean."""
        with self.transaction(read_only=True) as cur:
            yield RankSnapshot(self, cur, self._rank_mean(cur))

    def reset_index(self) -> None:
        """Mark every page unindexed (benchmarks rebuild the index from scratch)."""

        def reset(cur: Any) -> None:
            self._execute(cur, "UPDATE pages SET indexed_at = NULL")

        self.run(reset)

    # -- jobs ------------------------------------------------------------------
    def set_job(
        self,
        name: str,
        phase: str,
        state: str,
        stats: dict | None = None,
        *,
        started_at: float | None = None,
        finished_at: float | None = None,
    ) -> None:
        """Record the state of a job's phase (running, complete, …)."""
        row = (name, phase, state, started_at, finished_at, json.dumps(stats or {}))
        self.run(lambda cur: self._execute(cur, self.UPSERT_JOB, row))

    def get_job(self, name: str, phase: str) -> dict | None:
        rows = self._query(
            "SELECT state, started_at, finished_at, stats FROM jobs WHERE name = ? AND phase = ?",
            (name, phase),
        )
        if not rows:
            return None
        state, started, finished, stats = rows[0]
        return {
            "state": state,
            "started_at": started,
            "finished_at": finished,
            "stats": json.loads(stats),
        }

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _link_rows(links: Iterable[Link]) -> list[tuple[int, int, str | None]]:
    """Links as the (src, dst, anchor) rows INSERT_LINK takes."""
    return [link if len(link) == 3 else (link[0], link[1], None) for link in links]  # type: ignore[misc]


def _page_row(r: Sequence[Any]) -> tuple:
    fp, url, host, depth, status, ctype, fetched_at, fetch_ms, title, text, body, error, state = r[
        :13
    ]
    wfile, woffset, wlength, pdigest, tlength = r[13:18]
    etag, modified, digest, revisit, next_fetch, checked = r[18:]
    return (
        int(fp),
        url,
        host,
        int(depth),
        int(status),
        ctype,
        float(fetched_at),
        int(fetch_ms),
        title,
        text,
        bytes(body) if body is not None else None,
        error,
        state,
        wfile,
        None if woffset is None else int(woffset),
        None if wlength is None else int(wlength),
        pdigest,
        None if tlength is None else int(tlength),
        etag,
        modified,
        None if digest is None else int(digest),
        None if revisit is None else float(revisit),
        None if next_fetch is None else float(next_fetch),
        None if checked is None else float(checked),
    )


def open_store(db: DatabaseURL, warc_root: Path | None = None) -> Store:
    """Open the store a :class:`~srcrawl.sql.database_url.DatabaseURL` names (no schema yet);
    page texts kept in WARC files are read under ``warc_root``."""
    store: Store
    if db.kind == "sqlite":
        from srcrawl.sql.sqlite_store import SQLiteStore

        store = SQLiteStore(db.path, create_dirs=db.create_dirs)
    else:
        from srcrawl.sql.mysql_store import MySQLStore

        store = MySQLStore(db)
    store.warc_texts = WarcTexts(warc_root)
    return store
