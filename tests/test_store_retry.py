"""Store transactions survive the MySQL/MariaDB errors that pass, against the real server.

Many processes run the schema set-up and colliding writes at once (with MariaDB's
snapshot isolation on where the server has it, as 11.8 has by default); a connection
killed in the middle of a transaction, and a lock wait that times out, are run again
and leave the batch written exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql
import pytest

from srcrawl.core.errors import StoreError, StoreTransientError
from srcrawl.core.urls import fingerprint
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.migrations import SCHEMA_VERSION
from srcrawl.sql.mysql_store import MySQLStore
from srcrawl.sql.pages import Page
from srcrawl.sql.retry import Backoff
from srcrawl.sql.store import Store, open_store

HELPERS = Path(__file__).parent / "helpers"
sys.path.insert(0, str(HELPERS))
import store_stress  # noqa: E402

pytestmark = pytest.mark.mysql
WORKERS = 8
ROUNDS = 4


def _server(mysql_db: DatabaseURL) -> pymysql.connections.Connection:
    return pymysql.connect(
        host=mysql_db.host,
        port=mysql_db.port,
        user=mysql_db.user,
        password=mysql_db.password,
        autocommit=True,
    )


def _has_snapshot_isolation(conn: pymysql.connections.Connection) -> bool:
    with conn.cursor() as cur:
        cur.execute("SHOW VARIABLES LIKE 'innodb_snapshot_isolation'")
        return cur.fetchone() is not None


def _round(mysql_db: DatabaseURL, name: str, snapshot: bool) -> list[subprocess.Popen]:
    db = DatabaseURL(
        kind="mysql",
        host=mysql_db.host,
        port=mysql_db.port,
        user=mysql_db.user,
        password=mysql_db.password,
        database=name,
    )
    start = time.time() + 3.0  # every process imported and connected by then
    env = {**os.environ, "PYTHONPATH": str(HELPERS)}
    return [
        subprocess.Popen(
            [
                sys.executable,
                str(HELPERS / "store_stress.py"),
                db.url(),
                str(w),
                str(start),
                "1" if snapshot else "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in range(WORKERS)
    ]


def _check_rows(conn: pymysql.connections.Connection, name: str) -> None:
    """Every row once: the shared pages, each worker's own, the links, ranks, jobs, and
    the shared pages' index marks."""
    shared = [store_stress.page(store_stress.shared_url(i)) for i in range(store_stress.SHARED)]
    own = {
        store_stress.page(store_stress.own_url(w, i)).fp
        for w in range(WORKERS)
        for i in range(store_stress.OWN)
    }
    with conn.cursor() as cur:
        cur.execute(f"USE `{name}`")
        cur.execute("SELECT fp FROM pages")
        assert {int(fp) for (fp,) in cur.fetchall()} == {p.fp for p in shared} | own
        cur.execute("SELECT src, dst FROM links")
        links = {(int(a), int(b)) for a, b in cur.fetchall()}
        assert links == {(a, b) for a, b, _ in store_stress.links_of(shared)}
        cur.execute("SELECT COUNT(*), SUM(score) FROM ranks")
        n, total = cur.fetchone()
        assert n == store_stress.SHARED and abs(total - 1.0) < 1e-9
        cur.execute("SELECT name FROM jobs")
        assert sorted(r[0] for r in cur.fetchall()) == sorted(
            ["stress", *(f"stress-{w}" for w in range(WORKERS))]
        )
        # every shared page marked indexed by the last pass of some worker
        cur.execute("SELECT COUNT(*) FROM pages WHERE indexed_at IS NOT NULL")
        assert cur.fetchone()[0] == store_stress.SHARED


@pytest.mark.slow
def test_many_processes_set_up_the_schema_and_write_at_once(mysql_db: DatabaseURL) -> None:
    conn = _server(mysql_db)
    snapshot = _has_snapshot_isolation(conn)
    retries = 0
    for r in range(ROUNDS):
        name = f"{mysql_db.database}_stress{r}"
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        try:
            procs = _round(mysql_db, name, snapshot)
            outs = [(p, *p.communicate(timeout=300)) for p in procs]
            failed = [err.strip().splitlines()[-1:] for p, _out, err in outs if p.returncode]
            assert not failed, f"round {r}: {len(failed)} of {WORKERS} failed: {failed}"
            retries += sum(json.loads(out)["retries"] for _p, out, _err in outs)
            _check_rows(conn, name)
        finally:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    print(
        f"{ROUNDS} rounds of {WORKERS} processes: {retries} transactions run again "
        f"(snapshot isolation {'on' if snapshot else 'not available'})"
    )
    conn.close()


def _pages(tag: str, n: int) -> tuple[list[Page], list[tuple[int, int, str]]]:
    urls = [f"http://127.0.0.1:9/{tag}/{i}" for i in range(n)]
    pages = [
        Page(
            fp=fingerprint(u),
            url=u,
            host="127.0.0.1:9",
            status=200,
            fetched_at=1.0,
            title=u,
            text="text",
        )
        for u in urls
    ]
    return pages, [(p.fp, q.fp, "a") for p in pages for q in pages if p is not q]


def _wait_for_lock_wait(conn: pymysql.connections.Connection, thread: int) -> None:
    """Until the connection ``thread`` waits for a row lock inside its transaction."""
    deadline = time.monotonic() + 20
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute(
                "SELECT trx_state FROM information_schema.innodb_trx "
                "WHERE trx_mysql_thread_id = %s",
                (thread,),
            )
            row = cur.fetchone()
            if row and row[0] == "LOCK WAIT":
                return
            time.sleep(0.02)
    raise AssertionError(f"connection {thread} never waited for the lock")


def _empty_store(mysql_db: DatabaseURL) -> Store:
    store = open_store(mysql_db)
    store.init_schema()
    store.run(lambda cur: [cur.execute(f"DELETE FROM {t}") for t in ("pages", "links", "jobs")])
    return store


def test_a_connection_killed_inside_a_transaction_writes_its_batch_once(
    mysql_db: DatabaseURL,
) -> None:
    store = _empty_store(mysql_db)
    first, _ = _pages("killed", 5)
    store.save_fetched(first[:1], [])  # the row the other connection will hold
    pages, links = _pages("killed", 5)
    other = _server(mysql_db)
    with other.cursor() as cur:
        cur.execute(f"USE `{mysql_db.database}`")
        cur.execute("BEGIN")
        cur.execute("SELECT fp FROM pages WHERE fp = %s FOR UPDATE", (first[0].fp,))
    thread = store._conn.thread_id()
    writer = threading.Thread(target=store.save_fetched, args=(pages, links), daemon=True)
    writer.start()
    watch = _server(mysql_db)  # not ``other``: its transaction must stay as it is
    _wait_for_lock_wait(watch, thread)  # its upsert is under way: the transaction is open
    watch.close()
    with other.cursor() as cur:
        cur.execute("KILL CONNECTION %s", (thread,))
        cur.execute("COMMIT")
    writer.join(30)
    assert not writer.is_alive()
    assert store._conn.thread_id() != thread  # a new connection wrote the batch
    assert store.count("pages") == 5
    assert store.count("links") == len(links) == 20
    assert {p.url for p in store.get_pages([p.fp for p in pages])} == {p.url for p in pages}
    other.close()
    store.close()


@pytest.mark.slow
def test_a_lock_wait_timeout_runs_the_transaction_again(mysql_db: DatabaseURL) -> None:
    store = _empty_store(mysql_db)
    with store._conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    store.set_job("held", "crawl", "running")
    other = _server(mysql_db)
    with other.cursor() as cur:
        cur.execute(f"USE `{mysql_db.database}`")
        cur.execute("BEGIN")
        cur.execute("SELECT state FROM jobs WHERE name = 'held' FOR UPDATE")
    # the lock is held past the first run's 1 s wait, then let go
    releaser = threading.Timer(1.6, lambda: other.commit())
    releaser.start()
    started = time.monotonic()
    store.set_job("held", "crawl", "complete", {"pages": 3})
    releaser.join()
    assert time.monotonic() - started > 1.0  # the first run did time out
    assert store.get_job("held", "crawl")["state"] == "complete"
    assert store.count("jobs") == 1
    other.close()
    store.close()


def test_a_passing_error_is_given_up_on_after_its_tries(mysql_db: DatabaseURL) -> None:
    store = open_store(mysql_db)
    store.backoff = Backoff(tries=3, delay=0.01, max_delay=0.02)
    runs = []

    def deadlocked(cur: object) -> None:
        runs.append(1)
        raise pymysql.OperationalError(1213, "Deadlock found when trying to get lock")

    with pytest.raises(StoreTransientError, match="Deadlock"):
        store.run(deadlocked)
    assert len(runs) == 3
    # an error that does not pass is not run again
    runs.clear()
    with pytest.raises(Exception, match="syntax"):
        store.run(lambda cur: (runs.append(1), cur.execute("SELEC 1")))
    assert len(runs) == 1
    store.close()


@pytest.mark.slow
def test_the_schema_is_created_by_one_process_while_the_others_wait(mysql_db: DatabaseURL) -> None:
    name = f"{mysql_db.database}_lock"
    conn = _server(mysql_db)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        cur.execute("SELECT GET_LOCK(%s, 5)", (f"srcrawl:schema:{name}",))  # another creates it
        assert cur.fetchone()[0] == 1
    db = DatabaseURL(
        kind="mysql",
        host=mysql_db.host,
        port=mysql_db.port,
        user=mysql_db.user,
        password=mysql_db.password,
        database=name,
    )
    store = MySQLStore(db)
    try:
        store.schema_lock_timeout = 0.5
        with pytest.raises(StoreError, match="another process has been creating the schema"):
            store.init_schema()
        store.schema_lock_timeout = 60
        waiter = threading.Thread(target=store.init_schema, daemon=True)
        waiter.start()
        time.sleep(1.0)
        assert waiter.is_alive()  # it waits for the lock, and has created nothing
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{name}'"
            )
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT RELEASE_LOCK(%s)", (f"srcrawl:schema:{name}",))
        waiter.join(30)
        assert not waiter.is_alive() and store.schema_version() == SCHEMA_VERSION
    finally:
        store.close()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()
