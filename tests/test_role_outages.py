"""Every role waits out a Redis server killed under it, then goes on doing its job.

Real processes, as a user or docker compose runs them: ``pagerank`` and ``index``
on the embedded Redis (the command restarts it: srcrawl bench outage runs the same
check many times), and the always-on ones on a redis-server of the test's own
that it SIGKILLs and starts again on its port with its AOF: ``index --follow``,
``pagerank --every``, ``master start --keep-running`` with a slave, and the
portal (``serve``). Each must survive the outage without a traceback and do its
job afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from srcrawl.benchmarks.outage import one_run
from srcrawl.core.embedded import free_port
from srcrawl.core.urls import fingerprint
from srcrawl.indexer.search import QueryError, Searcher
from srcrawl.indexer.tokenizer import get_tokenizer
from srcrawl.settings.config import Config
from srcrawl.sql.pages import Page
from srcrawl.testweb import TestWeb

from .conftest import cli_env, run_cli
from .test_phase_outages import BACK, GONE, AofRedis

pytestmark = pytest.mark.slow  # every test here runs real processes for seconds

CLI = [sys.executable, "-m", "srcrawl.app.cli"]


@pytest.fixture
def aof_redis(tmp_path):
    server = AofRedis(tmp_path / "redis")
    yield server
    server.stop()


class Command:
    """A `srcrawl` command in its own process group, its output read as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        env = {**env, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [*CLI, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(s, lines), daemon=True)
            for s, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def said(self, words: str) -> int:
        return sum(words in line for line in self.out + self.err)

    def wait_for(self, check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not check():
            assert self.proc.poll() is None, (what, self.err[-20:])
            assert time.monotonic() < deadline, (what, self.out[-5:], self.err[-20:])
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM to the command (not its group: it stops its own children); its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for t in self._readers:
            t.join(timeout=10)
        return code


def no_tracebacks(home: Path) -> None:
    """The slaves' logs have none: every Redis call waited the outage out."""
    for log in (home / "logs").rglob("*.log"):
        text = log.read_text()
        assert "Traceback" not in text, (log, text[-3000:])


def page(name: str, text: str) -> Page:
    url = f"http://127.0.0.1:9/{name}"
    return Page(
        fp=fingerprint(url), url=url, host="127.0.0.1:9", fetched_at=time.time(), title=name,
        text=text,
    )  # fmt: skip


def finds(searcher: Searcher, word: str, url: str) -> bool:
    with contextlib.suppress(QueryError):  # an empty index, before the first merge
        return any(h.url == url for h in searcher.search(word, top=5).hits)
    return False


# -- the phases on the embedded Redis ----------------------------------------------
@pytest.mark.parametrize("phase", ["pagerank", "index"])
def test_a_phase_whose_embedded_redis_is_killed_mid_run_exits_0_and_is_exact(
    phase, tmp_path
) -> None:
    # its second run (a kill point early in the run); down long enough to outlast a
    # Redis client's own retries, well short of the masters' lease
    run = one_run(1, phase, tmp_path, down=8.0)
    assert run.killed and run.restarted, run
    assert run.exit_code == 0, run.stderr_tail
    assert run.exact, run.detail  # ranks equal networkx's; every page indexed once
    no_tracebacks(tmp_path / "home")


# -- the always-on roles ---------------------------------------------------------
def test_index_follow_goes_on_indexing_after_an_outage(aof_redis, keys, tmp_path) -> None:
    env = cli_env(aof_redis.url, keys.job, tmp_path)
    cfg = Config.load(env=env)
    store = cfg.store()
    store.save_fetched([page("old", "an old page about lighthouses")], [])
    follow = Command(["index", "--follow", "--slaves", "1", "--max-delay", "1s"], env)
    searcher = Searcher(store, cfg.index_path, tokenizer=get_tokenizer(None))
    try:
        url = "http://127.0.0.1:9/old"
        follow.wait_for(lambda: finds(searcher, "lighthouses", url), 90, "not indexed")
        aof_redis.kill_and_restart(down=1.0)
        new = page("new", "a page stored after the outage about zeppelins")
        store.save_fetched([new], [])
        follow.wait_for(lambda: finds(searcher, "zeppelins", new.url), 90, "not indexed after")
        follow.wait_for(lambda: follow.said(BACK), 30, "never said Redis is back")
    finally:
        code = follow.stop()
    assert code == 0, follow.err[-20:]
    assert follow.said(GONE) == follow.said(BACK) == 1, follow.err
    no_tracebacks(tmp_path / "home")
    cfg.close()


def _store_web(store, n: int = 30) -> list[str]:
    """``n`` pages, page i linking to i+1 and to page 0; their URLs."""
    urls = [f"http://127.0.0.1:9/p{i}" for i in range(n)]
    fps = [fingerprint(u) for u in urls]
    pages = [
        Page(fp=fp, url=u, host="127.0.0.1:9", fetched_at=1.0, title=f"p{i}", text="apples")
        for i, (u, fp) in enumerate(zip(urls, fps, strict=True))
    ]
    links = [(fps[i], fps[(i + 1) % n]) for i in range(n)]
    links += [(fps[i], fps[0]) for i in range(1, n)]
    store.save_fetched(pages, links)
    return urls


def test_pagerank_every_goes_on_ranking_after_an_outage(aof_redis, keys, tmp_path) -> None:
    env = cli_env(aof_redis.url, keys.job, tmp_path)
    cfg = Config.load(env=env)
    urls = _store_web(cfg.store())
    ranker = Command(["pagerank", "--every", "0.5s", "--slaves", "1"], env)

    def runs() -> int:
        done = [line for line in ranker.out if "; run " in line]
        return int(done[-1].split("; run ")[1].split(",")[0]) if done else 0

    try:
        ranker.wait_for(lambda: runs() >= 1, 90, "no first run")
        aof_redis.kill_and_restart(down=1.0)
        after = runs()
        ranker.wait_for(lambda: runs() >= after + 2, 90, "no run after the outage")
    finally:
        code = ranker.stop()
    assert code == 0, ranker.err[-20:]
    assert ranker.said("pagerank --every stopped after")
    assert ranker.said(GONE) == ranker.said(BACK) == 1, ranker.err
    top = run_cli(["export", "ranks", "--limit", "1"], env)
    assert top.stdout.startswith(urls[0] + "\t")  # every page links to p0
    no_tracebacks(tmp_path / "home")
    cfg.close()


def test_an_always_on_master_crawls_seeds_given_after_an_outage(aof_redis, keys, tmp_path) -> None:
    env = cli_env(aof_redis.url, keys.job, tmp_path)
    cfg = Config.load(env=env)
    polite = ["--delay", "0.02", "--delay-factor", "0", "--depth", "1", "--fetch-timeout", "2"]
    with TestWeb.generate(hosts=2, pages=8, seed=3) as tw:
        first, later = tw.seed_urls[0], tw.seed_urls[1]
        master = Command(["master", "start", first, *polite, "--keep-running"], env)
        slave = Command(["slave", "start", "--phases", "crawl", "--threads", "4"], env)

        def stored() -> set[str]:
            return {p.url for p in cfg.store().iter_pages()}

        try:
            master.wait_for(lambda: first in stored(), 60, "the first seed was not crawled")
            aof_redis.kill_and_restart(down=1.0)
            seeded = run_cli(["seed", later], env)
            assert seeded.returncode == 0, seeded.stderr
            master.wait_for(lambda: later in stored(), 90, "the seed given after was not crawled")
            master.wait_for(lambda: master.said(BACK), 30, "the master never said Redis is back")
            slave.wait_for(lambda: slave.said(BACK), 30, "the slave never said Redis is back")
        finally:
            codes = slave.stop(), master.stop()
    assert codes == (0, 0), (slave.err[-20:], master.err[-20:])
    assert master.said(GONE) == master.said(BACK) == 1, master.err
    assert slave.said(GONE) == slave.said(BACK) == 1, slave.err
    assert not [line for line in master.err + slave.err if "Traceback" in line]
    cfg.close()


def test_the_portal_answers_again_once_redis_is_back(aof_redis, keys, tmp_path) -> None:
    env = cli_env(aof_redis.url, keys.job, tmp_path)
    cfg = Config.load(env=env)
    cfg.store().save_fetched([page("kept", "a page about lighthouses")], [])
    indexed = run_cli(["index", "--slaves", "1"], env, timeout=120)
    assert indexed.returncode == 0, indexed.stderr
    port = free_port()
    portal = Command(["serve", "--port", str(port), "--workers", "1"], env)
    url = f"http://127.0.0.1:{port}"

    def answers(path: str, **params: str) -> int:
        try:
            return requests.get(url + path, params=params, timeout=10).status_code
        except requests.RequestException:
            return 0

    try:
        portal.wait_for(lambda: answers("/healthz") == 200, 60, "the portal did not start")
        aof_redis.kill()
        portal.wait_for(lambda: answers("/healthz") == 503, 30, "/healthz says nothing is wrong")
        aof_redis.start()
        portal.wait_for(lambda: answers("/healthz") == 200, 60, "/healthz never recovered")
        assert answers("/api/status") == 200
        hits = requests.get(url + "/api/search", params={"q": "lighthouses"}, timeout=10)
        assert hits.status_code == 200
        assert [h["url"] for h in hits.json()["hits"]] == ["http://127.0.0.1:9/kept"]
    finally:
        code = portal.stop()
    # one server process: uvicorn ends gracefully, then exits as SIGTERM asked (143)
    assert code in (0, 128 + signal.SIGTERM), portal.err[-20:]
    cfg.close()
