"""One process of the store stress test: the schema set-up, then writes that collide.

Run as ``python store_stress.py DB_URL WORKER START SNAPSHOT``: waits until the epoch
second START (so every process of a round begins at once), runs ``init_schema`` and
then writes, several times over, rows every worker writes too (the same pages in a
different order, the same links, ranks, job row and index marks) and rows of its own.
With SNAPSHOT = 1, every connection runs with ``innodb_snapshot_isolation`` on, as
MariaDB 11.8 does by default. Prints one JSON line: the transactions run again.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time

import pymysql

from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.mysql_store import MySQLStore
from srcrawl.sql.pages import Page

SHARED = 60  # pages every worker writes
OWN = 20  # pages each worker writes alone
PASSES = 3


def shared_url(i: int) -> str:
    return f"http://127.0.0.1:9/shared/{i}"


def own_url(worker: int, i: int) -> str:
    return f"http://127.0.0.1:9/own/{worker}/{i}"


def page(url: str) -> Page:
    from srcrawl.core.urls import fingerprint

    return Page(
        fp=fingerprint(url),
        url=url,
        host="127.0.0.1:9",
        status=200,
        fetched_at=1.0,
        title="t",
        text=f"words of {url}",
    )


def links_of(pages: list[Page]) -> list[tuple[int, int, str]]:
    """Each page links to the next two of the list (in the shared pages' own order)."""
    return [
        (p.fp, pages[(i + k) % len(pages)].fp, "next") for i, p in enumerate(pages) for k in (1, 2)
    ]


class RetryCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.retries = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.retries += "runs again" in record.getMessage()


def snapshot_isolated(store: MySQLStore) -> None:
    """Every connection of ``store`` (reconnections too) with snapshot isolation on."""
    connect = store._connect

    def connect_isolated() -> pymysql.connections.Connection:
        conn = connect()
        with conn.cursor() as cur:
            cur.execute("SET SESSION innodb_snapshot_isolation = ON")
        return conn

    store._connect = connect_isolated  # type: ignore[method-assign]
    store._conn.close()
    store._conn = connect_isolated()


def work(store: MySQLStore, worker: int) -> None:
    rng = random.Random(worker)
    shared = [page(shared_url(i)) for i in range(SHARED)]
    own = [page(own_url(worker, i)) for i in range(OWN)]
    marks = [(p.fp, 1.0) for p in shared]
    for n in range(PASSES):
        order = shared[:]
        rng.shuffle(order)  # rows locked in another order than the other workers'
        store.save_fetched(order[:30] + own[n::PASSES], links_of(shared)[: 60 + n])
        store.save_fetched(order[30:], links_of(shared))
        store.put_links(rng.sample(links_of(shared), 40))
        store.set_job("stress", "crawl", "running", {"worker": worker})
        store.set_job(f"stress-{worker}", "crawl", "running", {"pass": n})
        rng.shuffle(marks)
        store.mark_indexed(marks, 2.0 + n)  # the index master's bookkeeping
        store.replace_ranks([(p.fp, 1.0 / SHARED) for p in shared])


def main() -> None:
    url, worker, start, snapshot = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    counter = RetryCounter()
    logging.getLogger("srcrawl.store").addHandler(counter)
    store = MySQLStore(DatabaseURL.parse(url))
    if snapshot == "1":
        snapshot_isolated(store)
    time.sleep(max(0.0, start - time.time()))
    store.init_schema()
    work(store, worker)
    store.close()
    print(json.dumps({"worker": worker, "retries": counter.retries}))


if __name__ == "__main__":
    main()
