"""MariaDB's ``disks`` plugin (information_schema.DISKS), installed for a test and
uninstalled after it, or found absent: the server is shared by every test run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pymysql

from srcrawl.sql.database_url import DatabaseURL


def _connect(db: DatabaseURL) -> pymysql.connections.Connection:
    return pymysql.connect(host=db.host, port=db.port, user=db.user, password=db.password)


def disks_plugin_installed(db: DatabaseURL) -> bool:
    conn = _connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT 1 FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'DISKS' "
                "AND PLUGIN_STATUS = 'ACTIVE'"
            )
            return cur.fetchone() is not None
    finally:
        conn.close()


@contextlib.contextmanager
def disks_plugin(db: DatabaseURL) -> Iterator[None]:
    """The plugin installed while the block runs; uninstalled after it unless it was
    there before."""
    if disks_plugin_installed(db):
        yield
        return
    conn = _connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("INSTALL SONAME 'disks'")
        try:
            yield
        finally:
            with conn.cursor() as cur:
                cur.execute("UNINSTALL SONAME 'disks'")
    finally:
        conn.close()
