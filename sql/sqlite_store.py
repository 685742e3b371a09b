"""The SQLite backend: one file, WAL journal, for a single machine."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from srcrawl.core.defaults import DEFAULT_SQLITE_BULK_CACHE_MB
from srcrawl.core.errors import StoreDataError, StoreError
from srcrawl.sql.migrations import RETIRED_INDEXES, schema_statements
from srcrawl.sql.pages import upsert_page
from srcrawl.sql.store import Store

_BULK_DROPPED_INDEXES = tuple(
    m.group(1)
    for m in (
        re.match(r"CREATE INDEX IF NOT EXISTS (\w+) ON (pages|links) ", st)
        for st in schema_statements("sqlite")
    )
    if m
)
"""Secondary indexes of pages and links, as the schema file names them."""


class SQLiteStore(Store):
    dialect = "sqlite"

    UPSERT_PAGE = upsert_page("ON CONFLICT (fp) DO UPDATE SET", "excluded.{}")
    ADD_FETCH_OUTCOME = (
        "ALTER TABLE pages ADD COLUMN error TEXT NULL",
        "ALTER TABLE pages ADD COLUMN body_state TEXT NOT NULL DEFAULT 'complete'",
    )
    ADD_WARC = (
        ("warc_file_id", "ALTER TABLE pages ADD COLUMN warc_file_id INTEGER NULL"),
        ("warc_offset", "ALTER TABLE pages ADD COLUMN warc_offset INTEGER NULL"),
        ("warc_length", "ALTER TABLE pages ADD COLUMN warc_length INTEGER NULL"),
        ("payload_digest", "ALTER TABLE pages ADD COLUMN payload_digest TEXT NULL"),
        ("text_length", "ALTER TABLE pages ADD COLUMN text_length INTEGER NULL"),
    )
    ADD_REVISIT = (
        "ALTER TABLE pages ADD COLUMN etag TEXT NULL",
        "ALTER TABLE pages ADD COLUMN last_modified TEXT NULL",
        "ALTER TABLE pages ADD COLUMN digest INTEGER NULL",
        "ALTER TABLE pages ADD COLUMN revisit REAL NULL",
        "ALTER TABLE pages ADD COLUMN next_fetch REAL NULL",
        "ALTER TABLE pages ADD COLUMN checked_at REAL NULL",
    )
    INSERT_WARC_FILE = "INSERT OR IGNORE INTO warc_files (name) VALUES (?)"
    # read in the writer's BEGIN IMMEDIATE transaction: no other writer's row goes unseen
    WARC_FILE_ID = "SELECT id FROM warc_files WHERE name = ?"
    MOVE_WARC_NAMES = (
        "INSERT OR IGNORE INTO warc_files (name) "
        "SELECT DISTINCT warc_file FROM pages WHERE warc_file IS NOT NULL",
        # both at once: a crash in between must not leave rows with neither
        "UPDATE pages SET warc_file = NULL, "
        "warc_file_id = (SELECT id FROM warc_files WHERE name = pages.warc_file) "
        "WHERE warc_file IS NOT NULL",
        # its bytes are free now either way; a SQLite before 3.35 keeps the empty column
        *(
            ("ALTER TABLE pages DROP COLUMN warc_file",)
            if sqlite3.sqlite_version_info >= (3, 35)
            else ()
        ),
    )
    INSERT_LINK = "INSERT OR IGNORE INTO links (src, dst, anchor) VALUES (?, ?, ?)"
    ADD_LINK_ANCHOR = "ALTER TABLE links ADD COLUMN anchor TEXT NULL"
    UPSERT_JOB = (
        "INSERT INTO jobs (name, phase, state, started_at, finished_at, stats) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name, phase) DO UPDATE SET "
        "state = excluded.state, "
        "started_at = COALESCE(excluded.started_at, jobs.started_at), "
        "finished_at = excluded.finished_at, stats = excluded.stats"
    )
    UPSERT_META = "INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)"

    def __init__(self, path: str, *, create_dirs: bool = False) -> None:
        """Open (or create) the file ``path``; with ``create_dirs``, its missing
        directories too. A path the user typed gets no directories made up for
        it: a typo there must not quietly start a new, empty store."""
        super().__init__()
        self.path = path
        if path != ":memory:":
            parent = Path(path).parent
            if create_dirs:
                parent.mkdir(parents=True, exist_ok=True)
            elif not parent.is_dir():
                raise StoreError(
                    f"cannot open SQLite database {path!r}: the directory {str(parent)!r} "
                    "does not exist (create it first, or correct the database URL)"
                )
        try:
            # isolation_level=None: transactions are explicit BEGIN/COMMIT
            self._conn = sqlite3.connect(
                path, timeout=60.0, isolation_level=None, check_same_thread=False
            )
            self._wal()
            # NORMAL in WAL mode: a crash never corrupts, a power loss may drop
            # the last commits, which the queues' acks then replay
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=60000")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open SQLite database {path!r}: {e}") from e

    def _wal(self, wait: float = 60.0) -> None:
        """Put the file in WAL mode (kept in the file: a no-op once it is).

        Processes that open a new file at once (a local crawl forks its master
        and slaves together) each ask for the exclusive lock the switch takes
        while holding a shared one; SQLite fails all but one at once instead of
        waiting, as waiting would deadlock. Once one has switched, the others'
        retries find the file in WAL mode.
        """
        deadline = time.monotonic() + wait
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _begin(self) -> Any:
        cur = self._conn.cursor()
        # IMMEDIATE takes the write lock up front, so two writers queue up on
        # busy_timeout instead of failing when a reader upgrades
        cur.execute("BEGIN IMMEDIATE")
        return cur

    def _begin_read(self) -> Any:
        cur = self._conn.cursor()
        # DEFERRED: in WAL mode a reader sees a snapshot and never waits for a writer
        cur.execute("BEGIN DEFERRED")
        return cur

    def _commit(self) -> None:
        self._conn.execute("COMMIT")

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _sql(self, statement: str) -> str:
        return statement

    def _columns(self, cur: Any, table: str) -> set[str]:
        # table names come from this package, never from data
        return {row[1] for row in cur.execute(f"PRAGMA table_info({table})").fetchall()}

    def _retire_indexes(self, cur: Any) -> None:
        for _table, index in RETIRED_INDEXES:
            cur.execute(f"DROP INDEX IF EXISTS {index}")  # names from our code

    def _translate_error(self, e: Exception) -> Exception | None:
        if isinstance(e, sqlite3.IntegrityError | sqlite3.DataError):
            return StoreDataError(f"SQLite ({self.path}): {e}")
        if isinstance(e, sqlite3.Error):
            return StoreError(f"SQLite ({self.path}): {e}")
        return None

    @contextlib.contextmanager
    def _bulk_settings(self) -> Iterator[None]:
        # The secondary indexes of pages and links are dropped for the load
        # and built again from the schema file after it: one sort per index
        # instead of a random B-tree insert per row (10M links: 2.5x faster).
        # A large page cache keeps the tables' own B-trees in memory meanwhile.
        with self._lock:
            (saved,) = self._conn.execute("PRAGMA cache_size").fetchone()
            self._conn.execute(f"PRAGMA cache_size = {-DEFAULT_SQLITE_BULK_CACHE_MB * 1024:d}")
            with self.transaction() as cur:
                for name in _BULK_DROPPED_INDEXES:  # names from our own schema file
                    cur.execute(f"DROP INDEX IF EXISTS {name}")
        try:
            yield
        finally:
            with self._lock:
                self.init_schema()  # creates the dropped indexes again
                self._conn.execute(f"PRAGMA cache_size = {int(saved):d}")

    def size_bytes(self) -> int:
        """The database file and its write-ahead log (which holds the latest commits
        until a checkpoint moves them into the file)."""
        if self.path == ":memory:":
            return 0
        total = 0
        for name in (self.path, f"{self.path}-wal"):
            with contextlib.suppress(FileNotFoundError):  # no log yet, or truncated away
                total += Path(name).stat().st_size
        return total

    def close(self) -> None:
        self._conn.close()
