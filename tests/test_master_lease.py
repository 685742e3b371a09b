"""The crawl master trusts the format of nrq, not its senders, and commits only under its lease.

Real parts throughout: a Redis server, the slave runtime, the crawl master;
the takeover test runs `srcrawl master start` and `srcrawl slave start` as a
user does, against the test web on loopback.
"""

from __future__ import annotations

import collections
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from srcrawl.core.errors import LeaseLost
from srcrawl.core.keys import Keys
from srcrawl.core.urls import host_of
from srcrawl.master.crawl_master import CrawlMaster
from srcrawl.master.crawl_run import start_crawl
from srcrawl.master.frontier.outcomes import REJECTED, REJECTED_LINKS
from srcrawl.queues.crawl_protocol import Seed
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.envelope import encode
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.scope import Scope
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb

from .conftest import cli_env, logged_requests, stored_pages
from .test_crawl_master import FAST, GraphHandler, bfs, cfg_for, make_graph, run_slave_thread

SEED_A = "http://127.0.0.1:9000/p/0"

MALFORMED = [
    b"not a message at all",
    encode("bogus", {"q": "127.0.0.1:9000"}),  # a kind the crawl does not have
    encode("fetched", {"url": SEED_A, "depth": 0, "q": "nowhere"}),  # no fingerprint
    encode("fetched", {"url": SEED_A, "fp": "12", "depth": 0, "q": "nowhere"}),
    encode("fetched", {"url": "ftp://127.0.0.1:9000/", "fp": 12, "depth": 0, "q": "nowhere"}),
    encode("fetched", {"url": "/p/0", "fp": 12, "depth": 0, "q": "nowhere"}),  # not absolute
    encode("retry", {"url": SEED_A, "fp": 2**64, "depth": 0, "q": "nowhere"}),  # past 64 bits
    encode("deferred", {"url": SEED_A, "fp": 12, "depth": -1, "q": "nowhere"}),
]
# link entries of an otherwise good seed message: none has the shape of a link
BAD_LINKS = [
    ["http://127.0.0.1:9000/p/1", "123"],
    ["javascript:void(0)", 5],
    "http://127.0.0.1:9000/p/2",
    ["http://127.0.0.1:9000/p/3"],
    [SEED_A, 1.5],
]


def test_malformed_nrq_messages_are_counted_and_the_crawl_goes_on(
    redis_url, keys, tmp_path, caplog
) -> None:
    graph = make_graph(hosts=2, pages=60)
    expected = bfs(graph, [SEED_A], 3, {"127.0.0.1:9000"})
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, [SEED_A], FAST)
    nrq = PhaseQueues(cfg.redis(), cfg.keys, "crawl").nrq
    bad_seed = Seed(BAD_LINKS, 0).encode()  # type: ignore[arg-type]
    nrq.push([*MALFORMED, bad_seed])  # behind the good seed, before any outcome
    handler = GraphHandler(graph)
    slave, t = run_slave_thread(cfg, handler)
    try:
        with caplog.at_level(logging.WARNING, logger="srcrawl.master"):
            assert CrawlMaster.from_config(cfg).run() is True
    finally:
        slave.stopping.set()
        t.join(timeout=10)
    stats = {k.decode(): int(v) for k, v in cfg.redis().hgetall(cfg.keys.stats("crawl")).items()}
    assert stats[REJECTED] == len(MALFORMED)
    assert stats[REJECTED_LINKS] == len(BAD_LINKS)
    fetched = dict(handler.fetched)
    assert len(handler.fetched) == len(fetched) and fetched == expected
    said = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(said) == 1  # said once, counted always


# -- a stale master's writes, fenced ------------------------------------------------


def _job_state(client: redis.Redis, cfg: Config) -> dict[bytes, bytes | None]:
    """Every key of the job but the lease, with its serialized value: what a fenced write
    would change."""
    lease = cfg.keys.master_lease("crawl").encode()
    found = client.scan_iter(match=f"{cfg.keys.job_prefix}:*")  # braces are not glob
    return {k: client.dump(k) for k in sorted(found) if k != lease}


def test_a_master_that_lost_its_lease_to_another_commits_nothing(
    redis_url: str, keys: Keys, tmp_path: Path
) -> None:
    # The end-to-end takeover below stops the stale master at its renewal, before it
    # writes: here it skips the renewal and goes straight to its writes, so only the
    # fence (the lease must hold *this* master's id, not merely exist) keeps it out.
    graph = make_graph(hosts=2, pages=30)
    expected = bfs(graph, [SEED_A], 3, {"127.0.0.1:9000"})
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, [SEED_A], FAST)
    client = cfg.redis()
    srq = PhaseQueues(client, cfg.keys, "crawl").srq.key
    nrq = PhaseQueues(client, cfg.keys, "crawl").nrq
    handler = GraphHandler(graph)
    stale = CrawlMaster.from_config(cfg)
    stale.acquire(wait=False)
    stale.process(stale.frontier.take(100))  # the seed, committed while it leads
    assert stale.frontier.schedule()[0] >= 1
    # a slave's turn, by hand: the seed fetched, its outcome back in nrq
    tasks = client.lrange(srq, 0, -1)
    client.delete(srq)
    nrq.push(handler.handle(tasks))
    in_hand = stale.frontier.take(100)
    assert in_hand  # the outcome with the seed's links, in the stale master's hand
    # it is paused past its TTL (the lease lapses) and another master takes over
    client.delete(stale.lease.key)
    successor = CrawlMaster.from_config(cfg)
    successor.acquire(wait=False)
    assert client.exists(stale.lease.key) and not stale.lease.held()
    before = _job_state(client, cfg)
    assert before  # the frontier is there to be changed
    # it wakes up believing it leads and commits the batch in hand: refused whole
    with pytest.raises(LeaseLost, match="lost its lease"):
        stale.process(in_hand)
    with pytest.raises(LeaseLost):  # nor does it hand anything out ...
        stale.frontier.schedule()
    with pytest.raises(LeaseLost):  # ... or write a fenced transaction
        stale.seen.snapshot(stale.frontier.transaction)
    assert _job_state(client, cfg) == before
    # the successor replays the batch the stale master had in hand: nothing lost
    slave, t = run_slave_thread(cfg, handler)
    try:
        assert successor.run(acquired=True) is True
    finally:
        slave.stopping.set()
        t.join(timeout=10)
    counts = collections.Counter(u for u, _ in handler.fetched)
    assert [u for u, n in counts.items() if n > 1] == []
    assert dict(handler.fetched) == expected


# -- a master paused past its lease ------------------------------------------------

TTL = 2.0
DEPTH = 3
POLITE = [
    "--depth",
    str(DEPTH),
    "--delay",
    "0.1",
    "--delay-factor",
    "0",
    "--max-delay",
    "1",
    "--fetch-timeout",
    "1",
    "--robots-defer",
    "0.3",
    "--retry-backoff",
    "0.1",
]


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    log = tmp_path_factory.mktemp("web") / "access.jsonl"
    with TestWeb.generate(
        hosts=3,
        pages=40,
        seed=9,
        slow_seconds=0.5,
        crawl_delay=0,
        access_log=log,
        flush_interval=0.1,
    ) as tw:
        yield tw


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "srcrawl.app.cli", *args]


def _pages(cfg: Config) -> int:
    return int(cfg.redis().hget(cfg.keys.stats("crawl"), "pages") or 0)


def _wait_for(what, timeout: float, step: float = 0.02) -> float:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline
        time.sleep(step)
    return time.monotonic()


@pytest.mark.slow
def test_a_master_paused_past_its_lease_commits_nothing_and_the_crawl_ends_exact(
    web, redis_url, keys, tmp_path
) -> None:
    env = {**cli_env(redis_url, keys.job, tmp_path), "SRCRAWL_MASTER_LEASE_TTL": str(TTL)}
    cfg = Config.load(env=env)
    lease = cfg.keys.master_lease("crawl")
    holder = lambda: (cfg.redis().get(lease) or b"").decode()  # noqa: E731
    seeds = web.seed_urls
    a = subprocess.Popen(
        _cli("master", "start", *seeds, *POLITE), env=env, stderr=subprocess.PIPE, text=True
    )
    slaves = [
        subprocess.Popen(
            _cli("slave", "start", "--phases", "crawl", "--threads", "4"),
            env=env,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    b = None
    try:
        _wait_for(lambda: _pages(cfg) >= 15, 60)
        assert f":{a.pid}:" in holder()
        a.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        b = subprocess.Popen(_cli("master", "start"), env=env, stderr=subprocess.PIPE, text=True)
        # B waits for the lease while A's lives (renewed every TTL/3), then takes it
        took = _wait_for(lambda: f":{b.pid}:" in holder(), TTL + 5)
        assert took - stopped >= TTL * 2 / 3 - 0.1
        progress = _pages(cfg)
        _wait_for(lambda: _pages(cfg) > progress + 3, 60)  # B crawls
        a.send_signal(signal.SIGCONT)
        _, a_err = a.communicate(timeout=30)
        # A woke up believing it led: its first write found the lease gone, and it left
        assert a.returncode != 0, a_err[-2000:]
        assert "lost its lease" in a_err and f":{b.pid}:" in a_err, a_err[-2000:]
        assert "Traceback" not in a_err
        _, b_err = b.communicate(timeout=240)
        assert b.returncode == 0, b_err[-3000:]
    finally:
        for p in (a, b, *slaves):
            if p is not None and p.poll() is None:
                if p is a:
                    p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)
    pages = stored_pages(env)
    scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=DEPTH))
    want = web.web.expected_crawl(seeds, DEPTH, lambda url: scope.reject(url, 0) is None)
    assert len(pages) == len({p["url"] for p in pages})
    assert {p["url"]: p["depth"] for p in pages} == want
    # nothing was scheduled twice: every regular page was asked for once (the special
    # ones, slow or cut off, are asked again by design)
    ok = {p["url"] for p in pages if p["status"] == 200} - set(web.special.values())
    asked = collections.Counter(e["url"] for e in logged_requests(web) if e["url"] in ok)
    assert [u for u, n in asked.items() if n > 1] == []
