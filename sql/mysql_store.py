"""The MySQL/MariaDB backend (pymysql), for clusters."""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pymysql

from srcrawl.core.defaults import DEFAULT_SCHEMA_LOCK_TIMEOUT
from srcrawl.core.errors import StoreDataError, StoreError, StoreTransientError
from srcrawl.sql.base import TABLES
from srcrawl.sql.migrations import RETIRED_INDEXES
from srcrawl.sql.pages import upsert_page
from srcrawl.sql.retry import LOST_CONNECTION_ERRORS, TRANSIENT_MYSQL_ERRORS
from srcrawl.sql.store import Store

if TYPE_CHECKING:
    from srcrawl.sql.database_url import DatabaseURL

CONNECT_ERRORS = frozenset({2002, 2003, 2006, 2013})
"""Errors of a connect that may pass: no server listening (yet), the connection cut."""

log = logging.getLogger("srcrawl.store")


class MySQLStore(Store):
    dialect = "mysql"
    schema_lock_timeout: float = DEFAULT_SCHEMA_LOCK_TIMEOUT

    # pymysql turns executemany of "INSERT … VALUES (…)" into multi-row inserts
    UPSERT_PAGE = upsert_page("ON DUPLICATE KEY UPDATE", "VALUES({})")
    ADD_FETCH_OUTCOME = (
        "ALTER TABLE pages ADD COLUMN error VARCHAR(32) NULL, "
        "ADD COLUMN body_state VARCHAR(16) NOT NULL DEFAULT 'complete'",
    )
    ADD_WARC = (
        ("warc_file_id", "ALTER TABLE pages ADD COLUMN warc_file_id BIGINT NULL"),
        ("warc_offset", "ALTER TABLE pages ADD COLUMN warc_offset BIGINT NULL"),
        ("warc_length", "ALTER TABLE pages ADD COLUMN warc_length BIGINT NULL"),
        ("payload_digest", "ALTER TABLE pages ADD COLUMN payload_digest VARCHAR(64) NULL"),
        ("text_length", "ALTER TABLE pages ADD COLUMN text_length BIGINT NULL"),
    )
    ADD_REVISIT = (
        "ALTER TABLE pages ADD COLUMN etag VARCHAR(255) NULL, "
        "ADD COLUMN last_modified VARCHAR(255) NULL, ADD COLUMN digest BIGINT NULL, "
        "ADD COLUMN revisit DOUBLE NULL, ADD COLUMN next_fetch DOUBLE NULL, "
        "ADD COLUMN checked_at DOUBLE NULL",
    )
    INSERT_WARC_FILE = "INSERT IGNORE INTO warc_files (name) VALUES (?)"
    # a locking read sees the latest committed row, not the transaction's snapshot
    WARC_FILE_ID = "SELECT id FROM warc_files WHERE name_sha1 = UNHEX(SHA1(?)) LOCK IN SHARE MODE"
    MOVE_WARC_NAMES = (
        "INSERT IGNORE INTO warc_files (name) "
        "SELECT DISTINCT warc_file FROM pages WHERE warc_file IS NOT NULL",
        # left to right: warc_file_id is set from the name before the name goes
        "UPDATE pages SET warc_file_id = (SELECT id FROM warc_files "
        "WHERE name_sha1 = UNHEX(SHA1(pages.warc_file))), warc_file = NULL "
        "WHERE warc_file IS NOT NULL",
        "ALTER TABLE pages DROP COLUMN warc_file",
    )
    INSERT_LINK = "INSERT IGNORE INTO links (src, dst, anchor) VALUES (?, ?, ?)"
    ADD_LINK_ANCHOR = (
        "ALTER TABLE links ADD COLUMN anchor VARCHAR(256) CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_bin NULL, ADD KEY links_to (dst)"
    )
    UPSERT_JOB = (
        "INSERT INTO jobs (name, phase, state, started_at, finished_at, stats) "
        "VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE "
        "state = VALUES(state), started_at = COALESCE(VALUES(started_at), started_at), "
        "finished_at = VALUES(finished_at), stats = VALUES(stats)"
    )
    UPSERT_META = "REPLACE INTO meta (k, v) VALUES (?, ?)"

    def __init__(self, db: DatabaseURL) -> None:
        super().__init__()
        self.db = db
        self._lost = False
        """The connection broke (or the server killed it): the next transaction opens a
        new one."""
        self._conn = self._connect()

    def _connect(self) -> pymysql.connections.Connection:
        db = self.db
        try:
            return pymysql.connect(
                host=db.host,
                port=db.port,
                user=db.user,
                password=db.password,
                database=db.database,
                charset="utf8mb4",
                autocommit=False,
                connect_timeout=5,
                read_timeout=600,
                write_timeout=600,
                **tls_arguments(db),
            )
        except pymysql.MySQLError as e:
            passing = bool(e.args) and e.args[0] in CONNECT_ERRORS
            kind = StoreTransientError if passing else StoreError
            raise kind(f"cannot connect to MySQL at {db.redacted()}: {e.args[-1]}") from None

    def _reconnect(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()
        self._conn = self._connect()
        self._lost = False

    def _begin(self) -> Any:
        if self._lost:
            self._reconnect()
        try:
            self._conn.begin()
        except (pymysql.OperationalError, pymysql.InterfaceError) as e:
            # 2006/2013 or a closed socket: the server dropped an idle
            # connection; nothing was in flight, so one fresh connection is safe
            if isinstance(e, pymysql.InterfaceError) or (
                e.args and e.args[0] in LOST_CONNECTION_ERRORS
            ):
                self._reconnect()
                self._conn.begin()
            else:
                raise
        return self._conn.cursor()

    def _commit(self) -> None:
        self._conn.commit()

    def _rollback(self) -> None:
        self._conn.rollback()

    def _retire_indexes(self, cur: Any) -> None:
        for table, index in RETIRED_INDEXES:
            cur.execute(
                "SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() "
                "AND table_name = %s AND index_name = %s LIMIT 1",
                (table, index),
            )
            if cur.fetchone():
                cur.execute(f"ALTER TABLE {table} DROP INDEX {index}")  # names from our code

    def _columns(self, cur: Any, table: str) -> set[str]:
        cur.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = %s",
            (table,),
        )
        return {row[0].lower() for row in cur.fetchall()}

    def _sql(self, statement: str) -> str:
        # the statements are constants with no literal '?' or '%'
        return statement.replace("?", "%s")

    def _translate_error(self, e: Exception) -> Exception | None:
        if not isinstance(e, pymysql.MySQLError):
            return None
        code = e.args[0] if e.args and isinstance(e.args[0], int) else None
        # an InterfaceError: pymysql closed the socket after an error on it
        lost = isinstance(e, pymysql.InterfaceError) or code in LOST_CONNECTION_ERRORS
        if lost:
            self._lost = True
        kind: type[StoreError] = StoreError
        if lost or code in TRANSIENT_MYSQL_ERRORS:
            kind = StoreTransientError
        elif isinstance(e, pymysql.IntegrityError | pymysql.DataError):
            kind = StoreDataError
        detail = e.args[-1] if e.args else e
        return kind(f"MySQL ({self.db.redacted()}): {detail}" + (f" ({code})" if code else ""))

    @contextlib.contextmanager
    def _schema_lock(self) -> Iterator[None]:
        """A server-wide named lock per database (``GET_LOCK``): the first process creates
        or migrates the schema, the others wait for it (up to ``schema_lock_timeout``)
        and then find every table there. The server frees the lock when its connection
        ends, so a process that dies holding it blocks nobody."""
        name = f"srcrawl:schema:{self.db.database}"[:64]  # MySQL's limit on lock names
        got = self.run(
            lambda cur: self._execute(
                cur, "SELECT GET_LOCK(?, ?)", (name, self.schema_lock_timeout)
            ).fetchone()[0]
        )
        if got != 1:
            raise StoreError(
                f"MySQL ({self.db.redacted()}): another process has been creating the schema "
                f"for {self.schema_lock_timeout:.0f} s (lock {name!r} not free)"
            )
        try:
            yield
        finally:
            try:
                self.run(lambda cur: self._execute(cur, "SELECT RELEASE_LOCK(?)", (name,)))
            except StoreError as e:  # a new connection holds no lock: nothing to free
                log.warning("could not release the schema lock %r: %s", name, e)

    def size_bytes(self) -> int:
        """Data and index bytes of the store's tables, as the server's table
        statistics give them (InnoDB estimates them from its page counts)."""
        marks = ", ".join("?" * len(TABLES))
        rows = self._query(
            "SELECT COALESCE(SUM(data_length + index_length), 0) FROM information_schema.tables "
            f"WHERE table_schema = DATABASE() AND table_name IN ({marks})",
            list(TABLES),
        )
        return int(rows[0][0])

    def disk_free_bytes(self) -> int | None:
        """Free bytes of the disk holding the server's data directory (``@@datadir``), as
        MariaDB's ``information_schema.DISKS`` gives them (the ``disks`` plugin:
        ``INSTALL SONAME 'disks'``); None when the server has no such table (MySQL, or
        MariaDB without the plugin) or lists no disk holding the directory (the table
        shows disks to a user with the FILE privilege only). One try: a server that is
        down or busy raises StoreTransientError."""
        try:
            with self.transaction(read_only=True) as cur:
                (datadir,) = self._execute(cur, "SELECT @@datadir").fetchone()
                disks = self._execute(
                    cur, "SELECT Path, Available FROM information_schema.DISKS"
                ).fetchall()
        except StoreTransientError:
            raise
        except StoreError as e:  # 1109: no such table
            log.debug("the server does not show its disks: %s", e)
            return None
        return disk_available(datadir, disks)

    def close(self) -> None:
        with contextlib.suppress(pymysql.MySQLError):
            self._conn.close()


def disk_available(path: str, disks: Iterable[tuple[str, int]]) -> int | None:
    """Free bytes of the disk holding ``path`` among ``disks``, (mount path, kilobytes
    available) rows: the one mounted deepest above it; None if none holds it."""
    inside = [
        (len(mount), int(kb))
        for mount, kb in disks
        if mount == "/"
        or path.rstrip("/") == mount.rstrip("/")
        or path.startswith(mount.rstrip("/") + "/")
    ]
    return max(inside)[1] * 1024 if inside else None


def tls_arguments(db: DatabaseURL) -> dict[str, Any]:
    """pymysql's TLS arguments for ``db.ssl_mode`` (as the MySQL client's ``--ssl-mode``).

    An explicit context, not pymysql's ``ssl_ca``: given only a CA, pymysql
    would encrypt without checking the server's certificate.
    """
    mode = db.ssl_mode
    if not mode:
        return {}  # pymysql's default: TLS when the server offers it, unverified
    if mode == "disabled":
        return {"ssl_disabled": True}
    try:
        ctx = ssl.create_default_context(cafile=db.ssl_ca or None)
        # as pymysql does: the certificates MySQL makes for itself fail the strict checks
        ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
        ctx.check_hostname = mode == "verify_identity"
        if mode == "required":
            ctx.verify_mode = ssl.CERT_NONE
        if db.ssl_cert:
            ctx.load_cert_chain(db.ssl_cert, db.ssl_key or None)
    except (ssl.SSLError, OSError) as e:
        raise StoreError(f"cannot use the TLS files of {db.redacted()}: {e}") from None
    return {"ssl": ctx}
