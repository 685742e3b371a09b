"""The index and PageRank masters wait out a Redis server killed mid-run.

A redis-server of the test's own, with its AOF on, is SIGKILLed in the middle
of an index pass and of a PageRank run, then started again on the same port
with the same directory (it reloads its AOF). The masters and their slave
processes wait for it; each master says once that Redis went and once that
it is back. The index is exact (every page indexed exactly once). PageRank's
shards and rank pieces are kept out of the AOF, so the restarted server comes
back without them: the master notices and runs again, and the ranks still
equal networkx's.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

import pytest
from index_pages import assert_indexed_once, store_pages

from srcrawl.app.local import LocalSlaves
from srcrawl.core import embedded
from srcrawl.indexer.master import IndexMaster
from srcrawl.pagerank.job import RankOptions, rank_job
from srcrawl.pagerank.master import RankParams
from srcrawl.pagerank.slave import Piece, RankHandler
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.slave.runtime import Slave

from .test_pagerank import l1, networkx_ranks, put_web, random_web

GONE = "Redis is unreachable"
BACK = "Redis is back"


class AofRedis:
    """A redis-server with its AOF on, that a test kills and starts again on its port."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = embedded.free_port()
        self.url, self.proc = embedded.start_server(directory, self.port, daemonize=False)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def start(self) -> None:
        """Start it again on its port and directory (it reloads its AOF)."""
        _, self.proc = embedded.start_server(self.directory, self.port, daemonize=False)

    def kill_and_restart(self, down: float) -> None:
        """SIGKILL the server, leave it down ``down`` seconds, start it again."""
        self.kill()
        time.sleep(down)
        self.start()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def aof_redis(tmp_path):
    server = AofRedis(tmp_path / "redis")
    yield server
    server.stop()


def config(server: AofRedis, tmp_path: Path, job: str) -> Config:
    db = DatabaseURL(kind="sqlite", path=str(tmp_path / "store.db"))
    return Config(redis_url=server.url, db=db, job=job, home=tmp_path)


def said(caplog: pytest.LogCaptureFixture, logger: str, words: str) -> int:
    return sum(1 for r in caplog.records if r.name == logger and words in r.getMessage())


def in_thread(run, outcome: dict) -> threading.Thread:
    def target() -> None:
        try:
            outcome["result"] = run()
        except BaseException as e:  # surfaced by the test's assertions
            outcome["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


@pytest.mark.slow
def test_the_index_master_waits_out_a_killed_redis(aof_redis, keys, tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="srcrawl.indexer")
    cfg = config(aof_redis, tmp_path, keys.job)
    pages, repeat = 40, 5000  # ~300 KB of Chinese a page: jieba takes a while
    urls = store_pages(cfg.store(), "big", pages, repeat)
    master = IndexMaster.from_config(cfg, batch_pages=4, block_timeout=0.1, merge_wait=0.2)
    outcome: dict = {}
    with LocalSlaves(cfg, 2, ["index"]):
        t = in_thread(master.run, outcome)
        deadline = time.monotonic() + 120
        while master.report.indexed == 0:  # mid-pass: some pages merged, most not
            assert t.is_alive() and time.monotonic() < deadline, outcome
            time.sleep(0.05)
        aof_redis.kill_and_restart(down=1.0)
        t.join(timeout=300)
    assert not t.is_alive() and "error" not in outcome, outcome
    report = outcome["result"]
    assert 0 < report.indexed == pages and report.failed == 0
    assert_indexed_once(cfg.store(), cfg.index_path, urls, repeat)
    assert said(caplog, "srcrawl.indexer", GONE) == said(caplog, "srcrawl.indexer", BACK) == 1
    cfg.close()


@pytest.mark.slow
def test_pagerank_runs_again_when_redis_comes_back_without_its_shards(
    aof_redis, keys, tmp_path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="srcrawl.pagerank")
    cfg = config(aof_redis, tmp_path, keys.job)
    pages, links = random_web(20_000, seed=9)
    put_web(cfg.store(), pages, links)
    lines: list[str] = []
    params = RankParams(iterations=500, tol=1e-13)
    outcome: dict = {}
    with LocalSlaves(cfg, 2, ["pagerank"]):
        run = lambda: rank_job(cfg, params, RankOptions(shards=8), echo=lines.append)  # noqa: E731
        t = in_thread(run, outcome)
        deadline = time.monotonic() + 120
        while not any(line.startswith("iteration   3") for line in lines):
            assert t.is_alive() and time.monotonic() < deadline, (outcome, lines)
            time.sleep(0.01)
        aof_redis.kill_and_restart(down=0.5)
        t.join(timeout=300)
    assert not t.is_alive() and "error" not in outcome, (outcome, lines)
    result = outcome["result"]
    assert any("the run starts again" in line for line in lines), lines
    assert result.converged and result.reports[0].iteration == 1  # one whole run
    assert l1(result, networkx_ranks(pages, links)) <= 1e-6
    got = dict(zip(result.fps.tolist(), result.ranks.tolist(), strict=True))
    assert cfg.store().page_ranks(list(got)) == pytest.approx(got, rel=1e-9)  # what was stored
    assert said(caplog, "srcrawl.pagerank", GONE) == said(caplog, "srcrawl.pagerank", BACK) == 1
    cfg.close()


@pytest.mark.slow
def test_a_pagerank_run_told_to_stop_while_redis_is_gone_ends(
    aof_redis, keys, tmp_path, caplog
) -> None:
    # `pagerank --every` stopped (SIGTERM) during an outage that may never end: it must
    # not wait out the outage for good
    caplog.set_level(logging.WARNING, logger="srcrawl.pagerank")
    cfg = config(aof_redis, tmp_path, keys.job)
    pages, links = random_web(20_000, seed=9)
    put_web(cfg.store(), pages, links)
    lines: list[str] = []
    stopping = threading.Event()
    outcome: dict = {}
    params = RankParams(iterations=500, tol=1e-13)
    with LocalSlaves(cfg, 1, ["pagerank"]):
        t = in_thread(
            lambda: rank_job(
                cfg, params, RankOptions(shards=4), echo=lines.append, stopping=stopping
            ),
            outcome,
        )
        deadline = time.monotonic() + 120
        while not any(line.startswith("iteration   2") for line in lines):
            assert t.is_alive() and time.monotonic() < deadline, (outcome, lines)
            time.sleep(0.01)
        aof_redis.proc.send_signal(signal.SIGKILL)
        aof_redis.proc.wait(timeout=10)
        while not said(caplog, "srcrawl.pagerank", GONE):
            assert t.is_alive() and time.monotonic() < deadline, (outcome, lines)
            time.sleep(0.05)
        time.sleep(1.0)  # waiting out the outage now
        assert t.is_alive(), outcome
        stopping.set()
        t.join(timeout=30)
        assert not t.is_alive(), "the run still waits for Redis after being told to stop"
    assert "error" in outcome and "result" not in outcome, outcome


@pytest.mark.slow
def test_a_pagerank_slaves_bulk_write_waits_out_a_killed_redis(
    aof_redis, keys, tmp_path, caplog
) -> None:
    # the handler (and its bulk writer, a client of its own) exists before the slave
    # runtime gives the process's client its outage policy, as in a slave process
    caplog.set_level(logging.WARNING, logger="srcrawl.slave")
    cfg = config(aof_redis, tmp_path, keys.job)
    client = cfg.redis()
    handler = RankHandler(client, keys)
    Slave(client, keys, [handler])
    guard, key = keys.rank_piece(1, 5, 0), keys.rank_piece(1, 6, 0)
    client.set(guard, b"x")  # the running iteration's piece (in the AOF: it survives)
    handler._pending.append(Piece(key, guard, memoryview(b"the next ranks")))
    aof_redis.kill()
    outcome: dict = {}
    t = in_thread(handler.flush, outcome)
    deadline = time.monotonic() + 60
    while not said(caplog, "srcrawl.slave", GONE):  # waiting, not failing
        assert t.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.05)
    time.sleep(0.5)
    assert t.is_alive(), outcome
    aof_redis.start()
    t.join(timeout=60)
    assert not t.is_alive() and "error" not in outcome, outcome
    assert client.get(key) == b"the next ranks"  # written, so its task may be acknowledged
    assert said(caplog, "srcrawl.slave", GONE) == said(caplog, "srcrawl.slave", BACK) == 1
    cfg.close()


@pytest.mark.slow
def test_pagerank_goes_on_after_an_outage_longer_than_its_lease(
    aof_redis, keys, tmp_path, caplog
) -> None:
    """Redis away 4 s, the master's lease 1.5 s: the lease lapsed with nobody taking it,
    and the master takes it back rather than stopping."""
    caplog.set_level(logging.WARNING)
    cfg = config(aof_redis, tmp_path, keys.job)
    cfg = Config(redis_url=cfg.redis_url, db=cfg.db, job=cfg.job, home=cfg.home, lease_ttl=1.5)
    pages, links = random_web(5_000, seed=3)
    put_web(cfg.store(), pages, links)
    lines: list[str] = []
    outcome: dict = {}
    with LocalSlaves(cfg, 1, ["pagerank"]):
        run = lambda: rank_job(  # noqa: E731
            cfg, RankParams(iterations=500, tol=1e-13), RankOptions(shards=4), echo=lines.append
        )
        t = in_thread(run, outcome)
        deadline = time.monotonic() + 120
        while not any(line.startswith("iteration   3") for line in lines):
            assert t.is_alive() and time.monotonic() < deadline, (outcome, lines)
            time.sleep(0.01)
        aof_redis.kill_and_restart(down=4.0)
        t.join(timeout=300)
    assert not t.is_alive() and "error" not in outcome, (outcome, lines)
    assert said(caplog, "srcrawl.lease", "took it back") >= 1
    assert l1(outcome["result"], networkx_ranks(pages, links)) <= 1e-6
    cfg.close()


def test_a_script_met_by_a_restarted_server_without_it_says_redis_is_back(
    aof_redis, caplog
) -> None:
    # the server is killed while it runs a script (loaded by its first call: NOSCRIPT,
    # SCRIPT LOAD, EVALSHA); the call's retry reaches the server the failure restarted
    # (as a local run's does), which answers NOSCRIPT. redis-py loads a script once a
    # call and had: the call is loaded again. Its NOSCRIPT reply is the answer that
    # proves Redis back (the calls after it never failed).
    import redis

    from srcrawl.core.outage import RedisOutage, wait_out_outages
    from srcrawl.core.redis_script import register_script

    def restart() -> None:
        if aof_redis.proc.poll() is not None:
            aof_redis.start()

    caplog.set_level(logging.WARNING, logger="srcrawl.test")
    client = redis.Redis.from_url(aof_redis.url)
    wait_out_outages(client, RedisOutage(logging.getLogger("srcrawl.test"), on_failure=restart))
    slow = register_script(
        client,
        "local t = redis.call('TIME') local start = t[1] * 1e6 + t[2] "
        "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - start > 400000 "
        "return redis.call('incr', KEYS[1])",
    )
    assert client.incr("n") == 1
    killer = threading.Timer(0.15, aof_redis.kill)
    killer.start()
    assert slow(keys=["n"]) == 2  # the killed run incremented nothing
    killer.join()
    assert said(caplog, "srcrawl.test", GONE) == said(caplog, "srcrawl.test", BACK) == 1
    client.close()
