"""A host slow to answer holds no depth level of the others, and the depths stay exact.

`srcrawl crawl` over a small test web beside a loopback host whose answer drips a byte a
second: while that one fetch is in flight, the good host's deeper levels are fetched (the
access log says when each request started), and every good page is stored at its BFS
depth. The frontier's own arithmetic (a task in flight or backing off past --lag-after is
lagging work, the depth record switched on with it) is checked on Redis directly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from srcrawl.master.frontier.batch import Batch, Requeue
from srcrawl.master.frontier.host_queues import Frontier
from srcrawl.master.frontier.politeness import Politeness
from srcrawl.queues.crawl_protocol import FetchTask
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.lease import MasterLease
from srcrawl.testweb import TestWeb
from srcrawl.testweb.slow_host import slow_host

from .conftest import cli_env


def srcrawl(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["drip", "robots"])
def test_a_slow_host_holds_no_level_of_a_good_one(kind, redis_url, keys, tmp_path):
    log = tmp_path / "access.jsonl"
    depth = 4
    with (
        TestWeb.generate(
            hosts=1, pages=40, seed=5, access_log=log, flush_interval=0.1, slow_seconds=0
        ) as web,
        slow_host(kind, hold=8) as slow,
    ):
        want = web.web.expected_crawl(web.seed_urls, depth)
        env = cli_env(redis_url, keys.job, tmp_path)
        opts = ["--depth", str(depth), "--slaves", "1", "--delay", "0", "--delay-factor", "0"]
        opts += ["--fetch-tries", "1", "--lag-after", "0.5", "--robots-defer", "0.2"]
        r = srcrawl(["crawl", *web.seed_urls, slow.url, *opts], env)
        assert r.returncode in (0, 3), r.stderr[-3000:]
        time.sleep(0.3)  # the access log is flushed every 0.1 s
        entries = web.log_entries()
    # the slow host's first slow request: its seed page (robots.txt answers a 404 at once),
    # or for ``robots`` its robots.txt
    first = next(q for q in slow.requests if q.path != "/robots.txt" or kind == "robots")
    assert first.end is not None and first.end - first.start > 4
    # the slow host's first request (its seed page, or its robots.txt) was open while the
    # good host's pages two and three levels down were asked for
    during = {e["url"] for e in entries if first.start <= e["start_mono"] <= first.end}
    assert {want[u] for u in during if u in want} >= {2, 3}, sorted(during)
    pages = [json.loads(line) for line in srcrawl(["export", "pages"], env).stdout.splitlines()]
    good = {p["url"]: p["depth"] for p in pages if not p["url"].startswith(slow.url)}
    assert good == want  # each good page at its BFS depth, none more


@pytest.fixture
def frontier(redis_client, keys) -> Frontier:
    lease = MasterLease(redis_client, keys.master_lease("crawl"), "test", 30)
    lease.acquire(0)
    return Frontier(lease, keys, keys.srq("crawl"), keys.nrq("crawl"), "in-hand")


def test_a_task_out_past_lag_after_lags_and_switches_the_record_on(frontier, keys):
    r = frontier.client
    now = int(time.time() * 1000)
    r.hset(keys.crawl_inflight, mapping={"slow": '{"depth":0}', "fast": '{"depth":0}'})
    r.zadd(keys.crawl_flying, {"slow": now - 5_000, "fast": now})
    r.rpush(keys.crawl_next_level, '{"depth":1}')
    state = frontier.level_state(keys.nrq("crawl"), lag_after=1.0)
    assert frontier.lagging() == {"slow"}
    assert r.smembers(keys.crawl_slow) == {b"slow"}
    assert r.hget(keys.crawl_state, "record") == b"1"
    assert (state.inflight, state.lagging) == (1, 1)  # only the fast one holds the level


def test_a_task_backing_off_past_lag_after_is_lagging_work(frontier, keys):
    r = frontier.client
    now = int(time.time() * 1000)
    r.zadd(keys.crawl_backoff, {'{"q":"a","n":1}': now + 60_000, '{"q":"b","n":2}': now + 100})
    state = frontier.level_state(keys.nrq("crawl"), lag_after=1.0)
    assert (state.ready, state.lagging) == (1, 1)
    r.zrem(keys.crawl_backoff, '{"q":"b","n":2}')
    state = frontier.level_state(keys.nrq("crawl"), lag_after=1.0)
    assert state.level_done and state.lagging == 1  # the level may go on, the crawl may not end


def test_a_slow_outcome_keeps_its_queue_lagging_a_fast_one_unmarks_it(frontier, keys):
    r = frontier.client
    policy = Politeness(SimpleNamespace(strategy=CrawlStrategy(lag_after=1.0)))
    assert (policy.answer_lag(1_500), policy.answer_lag(200)) == (2, 0)
    frontier.commit(Batch(lag={"h": policy.answer_lag(1_500)}), b"")
    assert frontier.lagging() == {"h"} and r.smembers(keys.crawl_slow) == {b"h"}
    assert r.hget(keys.crawl_state, "record") == b"1"  # switched on with the mark
    frontier.commit(Batch(lag={"h": policy.answer_lag(200)}), b"")
    assert frontier.lagging() == set() and r.scard(keys.crawl_slow) == 0


@pytest.mark.parametrize(("wait_ms", "record"), [(5_000, b"1"), (300, None)])
def test_a_long_back_off_switches_the_depth_record_on(frontier, keys, wait_ms, record):
    now = int(time.time() * 1000)
    task = FetchTask("http://h/1", 1, 1, "h", failed=1)
    frontier.commit(Batch(backoff=[Requeue(task, now + wait_ms, slot=now)], lag_after=1000), b"")
    assert frontier.client.hget(keys.crawl_state, "record") == record
