"""What every part of the store stands on: one connection, transactions run again after a
passing error, and statements written once with ``?`` placeholders.

Every write is batched: one transaction per batch, ``executemany`` inside it. Statements
are constants written with ``?`` placeholders; the MySQL backend rewrites them to ``%s``.
No statement is ever assembled from user data.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from srcrawl.core.defaults import DEFAULT_STORE_BATCH, DEFAULT_STORE_BULK_BATCH
from srcrawl.core.errors import StoreTransientError
from srcrawl.sql.retry import Backoff

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

T = TypeVar("T")
TABLES = ("meta", "pages", "warc_files", "links", "ranks", "jobs")

log = logging.getLogger("srcrawl.store")


def chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``rows`` in lists of ``size`` (the last one shorter)."""
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class StoreBase(ABC):
    """The connection plumbing each backend implements and every part of the store uses."""

    dialect: str
    batch_size: int = DEFAULT_STORE_BATCH
    backoff: Backoff = Backoff()
    """How a transaction that failed for a passing reason is run again (``sql/retry.py``)."""

    UPSERT_META: str  # (k, v), per dialect

    def __init__(self) -> None:
        # one connection per store; threads of one process take turns
        self._lock = threading.RLock()

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

    def disk_free_bytes(self) -> int | None:
        """Free bytes of the disk a database server keeps the store's data on, when the
        server tells (see :meth:`MySQLStore.disk_free_bytes`); None: it does not, or the
        store is a file of this machine (SQLite: its directory is watched as a volume)."""
        return None

    @abstractmethod
    def _translate_error(self, e: Exception) -> Exception | None:
        """A StoreError for a driver error, or None if ``e`` is not one."""

    @abstractmethod
    def _columns(self, cur: Any, table: str) -> set[str]:
        """The column names of ``table`` (empty if there is no such table)."""

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
                yield cast("Store", self)  # each part of a Store is one
        finally:
            self.batch_size = saved

    def _bulk_settings(self) -> contextlib.AbstractContextManager[None]:
        """Backend settings for :meth:`bulk_load` (none by default)."""
        return contextlib.nullcontext()
