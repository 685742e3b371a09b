"""Killing an index slave mid-batch (a real process, SIGKILL) loses and doubles nothing."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

from srcrawl.config import Config
from srcrawl.indexer.blocks import term_postings
from srcrawl.indexer.master import IndexMaster
from srcrawl.indexer.postings import term_fingerprint
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.sql.store import Page
from srcrawl.urls import fingerprint

# a slave process with a short heartbeat, so the master presumes it dead quickly
SLAVE = """
import sys
from srcrawl.config import Config
from srcrawl.indexer.slave import IndexHandler
from srcrawl.slave.runtime import Slave
cfg = Config.load()
Slave(cfg, [IndexHandler(cfg)], worker_id=sys.argv[1], heartbeat_interval=0.2,
      heartbeat_ttl=1.0, block_timeout=0.2).run()
"""

REPEAT = 1500
SENTENCES = "我来到北京清华大学，他来到了网易杭研大厦。"  # 我 他 了: stop words
PAGES = 30


def expected_terms(i: int) -> dict[str, int]:
    return {"来到": 2 * REPEAT, "北京": REPEAT, "清华大学": REPEAT, "网易": REPEAT,
            "杭研": REPEAT, "大厦": REPEAT, f"page{i}": 1}  # fmt: skip


@pytest.mark.slow
def test_killing_a_slave_mid_batch_loses_and_doubles_nothing(
    store, db_url, redis_url, redis_client, keys, tmp_path, python
) -> None:
    urls = [f"http://127.0.0.1:9/big/{i}" for i in range(PAGES)]
    # ~90 KB of Chinese a page: a task of 10 pages keeps jieba busy for a while
    store.put_pages(
        Page(fp=fingerprint(u), url=u, host="127.0.0.1:9", fetched_at=1.0, title="",
             text=SENTENCES * REPEAT + f" page{i}")
        for i, u in enumerate(urls)
    )  # fmt: skip
    cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    q = PhaseQueues(redis_client, keys, "index")
    master = IndexMaster(cfg, batch_pages=10, block_timeout=0.1, merge_wait=0.2, reap_interval=0.2)
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.update(report=master.run()), daemon=True)
    runner.start()
    env = cfg.child_env()
    victim = subprocess.Popen([python, "-c", SLAVE, "victim-1"], env=env)
    healthy = None
    try:
        deadline = time.monotonic() + 60
        while not q.srq.pending("victim-1"):
            assert victim.poll() is None, "the slave died on its own"
            assert time.monotonic() < deadline, "the slave never took a task"
            time.sleep(0.02)
        time.sleep(0.3)
        held = q.srq.pending("victim-1")
        assert len(held) == 1 and len(q.nrq) == 0  # mid-batch: taken, not answered
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        assert q.srq.pending("victim-1") == held  # the task died with the slave, unanswered

        healthy = subprocess.Popen([python, "-c", SLAVE, "healthy-1"], env=env)
        runner.join(timeout=180)
        assert not runner.is_alive(), "the master never finished"
    finally:
        for proc in (victim, healthy):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=20)
    report = outcome["report"]
    assert report.requeued >= 1  # the reaper returned the victim's task
    assert report.indexed == PAGES and report.failed == 0
    assert q.srq.pending("victim-1") == []
    assert_every_page_indexed_once(store, urls)
    cfg.close()


def assert_every_page_indexed_once(store, urls: list[str]) -> None:
    """The postings, document frequencies and stats of exactly one indexing of ``urls``."""
    vocab = {t for i in range(PAGES) for t in expected_terms(i)}
    names = {term_fingerprint(t): t for t in vocab}
    with store.transaction() as cur:
        cur.execute("SELECT DISTINCT term_id FROM postings")
        ids = [int(i) for (i,) in cur.fetchall()]
    assert set(ids) == set(names)  # no term but the expected ones
    rows = [(names[i], fp, tf) for i in ids for fp, tf, _dl in term_postings(store, i).tolist()]
    postings = {(t, fp): tf for t, fp, tf in rows}
    assert len(postings) == len(rows)  # no page holds a term twice
    df = {names[i]: df for i, df in store.lookup_terms(ids).items()}
    expected = {
        (t, fingerprint(u)): tf for i, u in enumerate(urls) for t, tf in expected_terms(i).items()
    }
    assert postings == expected  # every page once, none twice
    shared = {t: PAGES for t in expected_terms(0) if not t.startswith("page")}
    assert df == {**shared, **{f"page{i}": 1 for i in range(PAGES)}}
    assert store.index_stats() == (PAGES, PAGES * (7 * REPEAT + 1))
