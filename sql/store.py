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
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from srcrawl.defaults import DEFAULT_STORE_BATCH

if TYPE_CHECKING:
    from srcrawl.config import DatabaseURL

SCHEMA_VERSION = "1"
TABLES = ("meta", "pages", "links", "terms", "postings", "doclens", "ranks", "jobs")


def compress_body(raw: bytes) -> bytes:
    """The stored form of a raw response body."""
    return zlib.compress(raw, 6)


def decompress_body(stored: bytes | None) -> bytes:
    return zlib.decompress(stored) if stored else b""


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

    def row(self) -> tuple:
        return (
            self.fp, self.url, self.host, self.depth, self.status, self.content_type,
            self.fetched_at, self.fetch_ms, self.title, self.text, self.body,
        )  # fmt: skip


PAGE_COLUMNS = "fp, url, host, depth, status, content_type, fetched_at, fetch_ms, title, text, body"


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

    # statements that differ by dialect
    UPSERT_PAGE: str
    INSERT_LINK: str
    UPSERT_JOB: str
    UPSERT_META: str

    def __init__(self) -> None:
        # one connection per store; threads of one process take turns
        self._lock = threading.RLock()

    # -- connection plumbing, per backend --------------------------------
    @abstractmethod
    def _begin(self) -> Any:
        """Start a transaction and return a cursor."""

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
    def _translate_error(self, e: Exception) -> Exception | None:
        """A StoreError for a driver error, or None if ``e`` is not one."""

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A cursor inside one transaction: committed on success, rolled back on error."""
        with self._lock:
            try:
                cur = self._begin()
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

    def _execute(self, cur: Any, statement: str, params: Sequence[Any] = ()) -> Any:
        cur.execute(self._sql(statement), tuple(params))
        return cur

    def _executemany(self, cur: Any, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            cur.executemany(self._sql(statement), rows)

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self.transaction() as cur:
            return list(self._execute(cur, statement, params).fetchall())

    # -- schema --------------------------------------------------------------
    def init_schema(self) -> None:
        """Create every table that is missing; safe to run any number of times."""
        with self.transaction() as cur:
            for statement in schema_statements(self.dialect):
                cur.execute(statement)
            self._execute(cur, self.UPSERT_META, ("schema_version", SCHEMA_VERSION))

    def schema_version(self) -> str | None:
        rows = self._query("SELECT v FROM meta WHERE k = ?", ("schema_version",))
        return rows[0][0] if rows else None

    # -- pages and links -----------------------------------------------------
    def save_fetched(self, pages: Sequence[Page], links: Sequence[tuple[int, int]]) -> None:
        """Store fetched pages and their out-links in one transaction per batch.

        A page fetched again replaces its row and its out-links, and is marked
        for indexing again; nothing is ever doubled.
        """
        srcs = [(p.fp,) for p in pages]
        with self.transaction() as cur:
            self._executemany(cur, self.UPSERT_PAGE, [p.row() for p in pages])
            self._executemany(cur, "DELETE FROM links WHERE src = ?", srcs)
            self._executemany(cur, self.INSERT_LINK, list(links))

    def put_pages(self, pages: Iterable[Page]) -> int:
        n = 0
        for batch in _chunks(pages, self.batch_size):
            with self.transaction() as cur:
                self._executemany(cur, self.UPSERT_PAGE, [p.row() for p in batch])
            n += len(batch)
        return n

    def put_links(self, links: Iterable[tuple[int, int]]) -> int:
        """Add links (source fp, target fp); links already present are ignored."""
        n = 0
        for batch in _chunks(links, self.batch_size * 10):
            with self.transaction() as cur:
                self._executemany(cur, self.INSERT_LINK, batch)
            n += len(batch)
        return n

    def get_pages(self, fps: Sequence[int], *, with_body: bool = False) -> list[Page]:
        """The stored pages among ``fps`` (in no particular order)."""
        out: list[Page] = []
        cols = PAGE_COLUMNS if with_body else PAGE_COLUMNS.replace(", body", ", NULL")
        for batch in _chunks(fps, 500):
            marks = ", ".join("?" * len(batch))
            # only the number of placeholders is built here, never data
            rows = self._query(f"SELECT {cols} FROM pages WHERE fp IN ({marks})", batch)
            out.extend(Page(*_page_row(r)) for r in rows)
        return out

    def iter_pages(self, *, batch: int = 1000, with_body: bool = False) -> Iterator[Page]:
        """Every stored page in fingerprint order, read in keyset-paginated batches."""
        cols = PAGE_COLUMNS if with_body else PAGE_COLUMNS.replace(", body", ", NULL")
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

    def iter_links(self, *, batch: int = 100_000) -> Iterator[list[tuple[int, int]]]:
        """Every link as (src, dst), in (src, dst) order, a batch at a time."""
        last: tuple[int, int] | None = None
        while True:
            if last is None:
                rows = self._query("SELECT src, dst FROM links ORDER BY src, dst LIMIT ?", (batch,))
            else:
                rows = self._query(
                    "SELECT src, dst FROM links WHERE src > ? OR (src = ? AND dst > ?) "
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

    def count(self, table: str) -> int:
        """Row count of one of the schema's tables."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        return int(self._query(f"SELECT COUNT(*) FROM {table}")[0][0])

    # -- ranks ---------------------------------------------------------------
    def replace_ranks(self, ranks: Iterable[tuple[int, float]]) -> int:
        """Replace the whole rank table in one transaction."""
        n = 0
        with self.transaction() as cur:
            self._execute(cur, "DELETE FROM ranks")
            for batch in _chunks(ranks, self.batch_size * 20):
                self._executemany(cur, "INSERT INTO ranks (fp, score) VALUES (?, ?)", batch)
                n += len(batch)
        return n

    def top_ranks(self, limit: int | None = None) -> list[tuple[str, float]]:
        """(url, rank) of ranked pages, highest rank first."""
        sql = "SELECT p.url, r.score FROM ranks r JOIN pages p ON p.fp = r.fp ORDER BY r.score DESC"
        if limit is None:
            return [(u, float(s)) for u, s in self._query(sql)]
        return [(u, float(s)) for u, s in self._query(sql + " LIMIT ?", (limit,))]

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
        with self.transaction() as cur:
            self._execute(cur, self.UPSERT_JOB, row)

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


def _page_row(r: Sequence[Any]) -> tuple:
    fp, url, host, depth, status, ctype, fetched_at, fetch_ms, title, text, body = r
    return (
        int(fp), url, host, int(depth), int(status), ctype, float(fetched_at), int(fetch_ms),
        title, text, bytes(body) if body is not None else None,
    )  # fmt: skip


def open_store(db: DatabaseURL) -> Store:
    """Open the store a :class:`~srcrawl.config.DatabaseURL` names (schema not applied)."""
    if db.kind == "sqlite":
        from srcrawl.sql.sqlite_store import SQLiteStore

        return SQLiteStore(db.path)
    from srcrawl.sql.mysql_store import MySQLStore

    return MySQLStore(db)
