"""The SQLite backend: one file, WAL journal, for a single machine."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from srcrawl.errors import StoreError
from srcrawl.sql.store import Store

_PAGE_UPDATE = ", ".join(
    f"{c} = excluded.{c}"
    for c in (
        "url", "host", "depth", "status", "content_type", "fetched_at", "fetch_ms",
        "title", "text", "body",
    )
)  # fmt: skip


class SQLiteStore(Store):
    dialect = "sqlite"

    UPSERT_PAGE = (
        "INSERT INTO pages (fp, url, host, depth, status, content_type, fetched_at, fetch_ms, "
        "title, text, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        f"ON CONFLICT (fp) DO UPDATE SET {_PAGE_UPDATE}, indexed_at = NULL"
    )
    INSERT_LINK = "INSERT OR IGNORE INTO links (src, dst) VALUES (?, ?)"
    UPSERT_JOB = (
        "INSERT INTO jobs (name, phase, state, started_at, finished_at, stats) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name, phase) DO UPDATE SET "
        "state = excluded.state, "
        "started_at = COALESCE(excluded.started_at, jobs.started_at), "
        "finished_at = excluded.finished_at, stats = excluded.stats"
    )
    UPSERT_META = "INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: transactions are explicit BEGIN/COMMIT
            self._conn = sqlite3.connect(
                path, timeout=60.0, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a crash never corrupts, a power loss may drop
            # the last commits, which the queues' acks then replay
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=60000")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open SQLite database {path!r}: {e}") from e

    def _begin(self) -> Any:
        cur = self._conn.cursor()
        # IMMEDIATE takes the write lock up front, so two writers queue up on
        # busy_timeout instead of failing when a reader upgrades
        cur.execute("BEGIN IMMEDIATE")
        return cur

    def _commit(self) -> None:
        self._conn.execute("COMMIT")

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _sql(self, statement: str) -> str:
        return statement

    def _translate_error(self, e: Exception) -> Exception | None:
        if isinstance(e, sqlite3.Error):
            return StoreError(f"SQLite ({self.path}): {e}")
        return None

    def close(self) -> None:
        self._conn.close()
