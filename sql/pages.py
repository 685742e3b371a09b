"""Pages and links: what a fetch stores (a :class:`Page` row and its out-links), written in
batches and read back by fingerprint, in pages or all at once.

The columns of ``pages`` are named once here (:data:`PAGE_FIELDS`): both backends' upserts
and every read of whole rows are made from that one list.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from srcrawl.sql.base import chunks
from srcrawl.sql.warc_pointers import WARC_NAME, WarcPointers
from srcrawl.warc.read import read_payload
from srcrawl.warc.storage import Pointer, WarcStorage


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
        :meth:`WarcPointers._warc_file_ids`)."""
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
conversion record after it); :meth:`PagesAndLinks.touch_pages` points the row at them."""


PAGE_FIELDS = (
    "fp",
    "url",
    "host",
    "depth",
    "status",
    "content_type",
    "fetched_at",
    "fetch_ms",
    "title",
    "text",
    "body",
    "error",
    "body_state",
    "warc_file_id",
    "warc_offset",
    "warc_length",
    "payload_digest",
    "text_length",
    "etag",
    "last_modified",
    "digest",
    "revisit",
    "next_fetch",
    "checked_at",
)
"""The columns of ``pages`` a fetch writes, in the order of :meth:`Page.row` (the one
column it leaves alone is ``indexed_at``, which the index sets and an upsert clears)."""
PAGE_COLUMNS = ", ".join(WARC_NAME if c == "warc_file_id" else c for c in PAGE_FIELDS)
"""The columns a :class:`Page` is read from, its WARC file by name (see :func:`_page_row`)."""


def upsert_page(on_conflict: str, new_value: str) -> str:
    """The page upsert of a dialect: ``on_conflict`` starts its update clause, and
    ``new_value`` names the value a column is given (``{}``: the column), e.g.
    ``excluded.{}``. A page fetched again is marked for indexing again."""
    columns = ", ".join(PAGE_FIELDS)
    marks = ", ".join("?" * len(PAGE_FIELDS))
    update = ", ".join(f"{c} = {new_value.format(c)}" for c in PAGE_FIELDS[1:])
    return (
        f"INSERT INTO pages ({columns}) VALUES ({marks}) {on_conflict} {update}, indexed_at = NULL"
    )


GONE = "(status IN (404, 410) OR (status >= 300 AND status < 400))"
"""Pages that are not there (any more): not found, gone, or now a redirect."""
INDEXABLE = f"error IS NULL AND body_state IN ('complete', 'capped') AND NOT {GONE}"
"""The pages whose text is indexed: fetched without an error, their body whole or capped,
and there (a page that went away leaves the index at its next pass)."""


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


def page_body(storage: WarcStorage, page: Page) -> bytes:
    """A stored page's body (read with ``with_body=True``), from its WARC record or (stores
    of schema 5 and before, or ``--body-store sql``) the store's compressed copy; b"" when
    it has none."""
    if page.warc_file and page.warc_offset is not None and page.warc_length is not None:
        return read_payload(storage, Pointer(page.warc_file, page.warc_offset, page.warc_length))
    return decompress_body(page.body)


class PagesAndLinks(WarcPointers):
    """Pages and their out-links: written per fetch or in bulk, read by fingerprint."""

    UPSERT_PAGE: str  # (a Page.row()), per dialect: see upsert_page
    INSERT_LINK: str  # (src, dst, anchor text or None)

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

    def put_pages(self, pages: Iterable[Page]) -> int:
        n = 0
        for batch in chunks(pages, self.batch_size):
            self._warc_ids.update(self.run(lambda cur, b=batch: self._write_pages(cur, b)))
            n += len(batch)
        return n

    def set_depths(self, depths: Iterable[tuple[int, int]]) -> int:
        """Set the depth of stored pages: (fp, depth) pairs; pages not stored are skipped."""
        n = 0
        for batch in chunks(depths, self.batch_size):
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
        for batch in chunks(links, self.batch_size * 10):
            rows = _link_rows(batch)
            self.run(lambda cur, r=rows: self._executemany(cur, self.INSERT_LINK, r))
            n += len(batch)
        return n

    def get_pages(self, fps: Sequence[int], *, with_body: bool = False) -> list[Page]:
        """The stored pages among ``fps`` (in no particular order)."""
        out: list[Page] = []
        cols = PAGE_COLUMNS if with_body else PAGE_COLUMNS.replace(", body,", ", NULL,")
        for batch in chunks(fps, 500):
            marks = ", ".join("?" * len(batch))
            # only the number of placeholders is built here, never data
            rows = self._query(f"SELECT {cols} FROM pages WHERE fp IN ({marks})", batch)
            out.extend(Page(*_page_row(r)) for r in rows)
        return out

    def stored_types(self, fps: Sequence[int]) -> dict[int, str]:
        """fp -> Content-Type of the pages among ``fps`` whose body is stored (a WARC
        record or the store's copy): what a stored copy may link to, read without texts."""
        out: dict[int, str] = {}
        for batch in chunks(fps, 500):
            marks = ", ".join("?" * len(batch))
            sql = (
                f"SELECT fp, content_type FROM pages WHERE fp IN ({marks}) "
                "AND (warc_file_id IS NOT NULL OR body IS NOT NULL)"
            )
            out.update((int(fp), ctype or "") for fp, ctype in self._query(sql, batch))
        return out

    def hosts_of(self, fps: Sequence[int]) -> dict[int, str]:
        """fp -> host of the stored pages among ``fps`` (what results are grouped by)."""
        out: dict[int, str] = {}
        for batch in chunks(fps, 500):
            marks = ", ".join("?" * len(batch))
            sql = f"SELECT fp, host FROM pages WHERE fp IN ({marks})"
            out.update((int(fp), host) for fp, host in self._query(sql, batch))
        return out

    def host_counts(self) -> dict[str, tuple[int, int]]:
        """host -> (URLs the crawl ended, of which with an error): each host's fetches as
        the store has them, in one grouped query."""
        rows = self._query(
            "SELECT host, COUNT(*), SUM(CASE WHEN error IS NULL THEN 0 ELSE 1 END) "
            "FROM pages GROUP BY host"
        )
        return {host: (int(n), int(failed or 0)) for host, n, failed in rows}

    def urls_of_host(self, host: str, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` stored (URL, depth) of ``host`` (``host[:port]``), by fingerprint."""
        rows = self._query(
            "SELECT url, depth FROM pages WHERE host = ? ORDER BY fp LIMIT ?", (host, limit)
        )
        return [(url, int(depth)) for url, depth in rows]

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

    def some_titles(self, limit: int) -> list[str]:
        """The titles of up to ``limit`` indexed pages, in whatever order the store reads
        them cheapest (no sort): what the portal completes words from."""
        sql = "SELECT title FROM pages WHERE indexed_at IS NOT NULL AND title <> '' LIMIT ?"
        return [title for (title,) in self._query(sql, (limit,))]

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
