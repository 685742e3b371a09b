"""Killing an index slave mid-batch (a real process, SIGKILL) loses and doubles nothing."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest
from index_pages import SLAVE, assert_indexed_once, store_pages

from srcrawl.indexer.master import IndexMaster
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.settings.config import Config

REPEAT = 5000
PAGES = 30


@pytest.mark.slow
def test_killing_a_slave_mid_batch_loses_and_doubles_nothing(
    store, db_url, redis_url, redis_client, keys, tmp_path, python
) -> None:
    # ~300 KB of Chinese a page: a task of 10 pages keeps jieba busy for a while
    urls = store_pages(store, "big", PAGES, REPEAT)
    cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    q = PhaseQueues(redis_client, keys, "index")
    master = IndexMaster.from_config(
        cfg, batch_pages=10, block_timeout=0.1, merge_wait=0.2, reap_interval=0.2
    )
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
        # mid-batch: taken, not answered (the batch in hand, and perhaps the one its
        # feeder took beside it when both were queued by the time it woke)
        assert 1 <= len(held) <= 2 and len(q.nrq) == 0
        assert len(set(held)) == len(held), held  # never one task twice
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        # what it still held died with it, unanswered (the batch in hand may have been
        # answered between the look and the kill when a second one waited beside it)
        left = q.srq.pending("victim-1")
        assert left and set(left) <= set(held), (left, held)

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
    assert_every_page_indexed_once(store, cfg.index_path, urls)
    cfg.close()


def assert_every_page_indexed_once(store, index, urls: list[str]) -> None:
    assert_indexed_once(store, index, urls, REPEAT)
