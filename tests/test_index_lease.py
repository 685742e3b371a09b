"""The index master's lease: a master paused past its TTL commits nothing once it wakes.

A real index run (master and slave processes, SIGSTOP/SIGCONT) and, for the
merge's own fence, a master whose lease is taken while it holds results.
"""

from __future__ import annotations

import fcntl
import signal
import subprocess
import time

import pytest
from index_pages import SLAVE, assert_indexed_once, store_pages
from tantivy_index import all_pages

from srcrawl.core.errors import LeaseLost
from srcrawl.core.urls import fingerprint
from srcrawl.indexer.documents import pack
from srcrawl.indexer.engine import IndexDoc
from srcrawl.indexer.master import IndexMaster
from srcrawl.indexer.protocol import DocumentsResult
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.settings.config import Config
from srcrawl.sql.pages import Page

# argv: merge wait. Prints its worker id, then runs; a lost lease is an uncaught
# LeaseLost (a traceback naming it, exit status 1).
MASTER = """
import sys
from srcrawl.settings.config import Config
from srcrawl.indexer.engine import IndexWriter
from srcrawl.indexer.master import IndexMaster
cfg = Config.load()
master = IndexMaster.from_config(cfg, batch_pages=1, window=4, merge_docs=10_000,
                     merge_wait=float(sys.argv[1]), block_timeout=0.1, reap_interval=0.2,
                     heartbeat_ttl=1.0)
print(master.id, flush=True)
master.run()
"""

TTL = 2.0
PAGES = 24
REPEAT = 60


def index_rows(store, index) -> tuple:
    """Everything an index is: its documents' pages, its last commit (Tantivy's
    meta.json), the pages marked indexed."""
    meta = (index / "meta.json").read_text() if (index / "meta.json").exists() else ""
    with store.transaction() as cur:
        cur.execute("SELECT fp, indexed_at FROM pages ORDER BY fp")
        marked = [tuple(r) for r in cur.fetchall()]
    return all_pages(index) if meta else [], meta, marked


def assert_exact(store, index, urls: list[str]) -> None:
    assert_indexed_once(store, index, urls, REPEAT)


def _writer_free(index) -> bool:
    """Whether no process holds Tantivy's writer lock on ``index`` (flock, as Tantivy)."""
    path = index / ".tantivy-writer.lock"
    if not path.exists():
        return True
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def _stop(*procs: subprocess.Popen | None) -> None:
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)


@pytest.mark.slow
def test_a_master_paused_past_its_lease_commits_nothing_and_the_index_is_exact(
    store, db_url, redis_url, redis_client, keys, tmp_path, python
) -> None:
    urls = store_pages(store, "p", PAGES, REPEAT)
    cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    env = {**cfg.child_env(), "SRCRAWL_MASTER_LEASE_TTL": str(TTL)}
    q = PhaseQueues(redis_client, keys, "index")
    lease = keys.master_lease("index")
    first = second = slave = None
    try:
        # A gathers results for a long merge wait: paused, it holds some unmerged
        first = subprocess.Popen(
            [python, "-c", MASTER, "60"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        first_id = first.stdout.readline().decode().strip()
        assert first_id, first.stderr.read().decode()
        slave = subprocess.Popen([python, "-c", SLAVE, "slave-1"], env=env)
        deadline = time.monotonic() + 60
        while True:
            while not q.nrq.pending(first_id):
                assert first.poll() is None and time.monotonic() < deadline, "A got no result"
                time.sleep(0.01)
            first.send_signal(signal.SIGSTOP)
            if _writer_free(cfg.index_path) and q.nrq.pending(first_id):
                break
            # caught inside a commit (it holds Tantivy's writer lock for that long): a
            # master stalled there blocks its successor's commits until it runs or dies
            first.send_signal(signal.SIGCONT)
            time.sleep(0.02)
        held = q.nrq.pending(first_id)
        assert held  # results held, not written
        time.sleep(TTL + 0.5)
        assert redis_client.get(lease) is None  # lapsed: A could not renew it

        second = subprocess.Popen(
            [python, "-c", MASTER, "0.2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _, err = second.communicate(timeout=180)
        assert second.returncode == 0, err.decode()
        assert_exact(store, cfg.index_path, urls)
        after_b = index_rows(store, cfg.index_path)
        assert store.get_job(keys.job, "index")["state"] == "complete"

        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=60)
        assert first.returncode != 0
        assert "LeaseLost" in err.decode() and "lost its lease" in err.decode(), err.decode()
        # A woke up holding results and committed none of them, nor its job record
        assert index_rows(store, cfg.index_path) == after_b
        assert store.get_job(keys.job, "index")["state"] == "complete"
        assert redis_client.get(lease) is None  # B released it; A did not touch it
    finally:
        _stop(first, second, slave)
    assert_exact(store, cfg.index_path, urls)
    cfg.close()


def test_a_merge_after_the_lease_was_taken_writes_nothing_and_acknowledges_nothing(
    store, db_url, redis_url, redis_client, keys, tmp_path
) -> None:
    fp = fingerprint("http://127.0.0.1:9/one")
    store.put_pages([Page(fp=fp, url="http://127.0.0.1:9/one", host="h", fetched_at=1.0)])
    cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    master = IndexMaster.from_config(cfg)
    master.lease.acquire()
    raw = DocumentsResult(1, 1, 0, pack([IndexDoc(fp, 1.0, "h", "", "词 词")])).encode()
    q = PhaseQueues(redis_client, keys, "index")
    q.nrq.push([raw])
    master.held.take(q.nrq.pop(master.id, 10))
    before = index_rows(store, cfg.index_path)
    redis_client.set(master.lease.key, "successor", px=60_000)  # it stalled; B took over
    with pytest.raises(LeaseLost, match="successor holds it now"):
        master._merge()
    assert index_rows(store, cfg.index_path) == before  # nothing committed, nothing marked
    assert q.nrq.pending(master.id) == [raw]  # left for the successor
    # held again by this master, the same results merge and acknowledge
    redis_client.set(master.lease.key, master.lease.holder, px=60_000)
    master._merge()
    assert all_pages(cfg.index_path) == [fp] and q.nrq.pending(master.id) == []
    assert index_rows(store, cfg.index_path)[2][0][1] is not None  # marked after the commit
    cfg.close()
