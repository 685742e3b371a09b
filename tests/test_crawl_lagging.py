"""A host whose robots.txt keeps failing does not hold the depth levels of the others.

First against the real master and slave runtime with a handler that answers
from a small graph (one host deferred for a while), then `srcrawl crawl`
over the test web beside a seed whose robots.txt answers 500.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time

import pytest
from broken_host import Failing

from srcrawl.core.urls import fingerprint
from srcrawl.master.crawl_master import CrawlMaster
from srcrawl.master.crawl_run import start_crawl
from srcrawl.queues.crawl_protocol import Deferred, Fetched, FetchTask, canonical_links
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.settings.config import Config
from srcrawl.slave.runtime import Slave
from srcrawl.testweb import TestWeb

from .conftest import cli_env as env_for
from .conftest import logged_requests

A = "http://127.0.0.1:9100"
B = "http://127.0.0.1:9101"


def srcrawl(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def stored(env: dict[str, str]) -> list[dict]:
    out = srcrawl(["export", "pages"], env)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


class LateHostHandler:
    """Pages from ``graph``; tasks of ``late_host`` come back deferred ``defers`` times first."""

    phase = "crawl"
    batch_size = 1
    threads = 4

    def __init__(self, graph: dict[str, list[str]], late_host: str, defers: int) -> None:
        self.graph = graph
        self.late_host = late_host
        self.defers = defers
        self.fetched: list[tuple[str, int]] = []

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        out = []
        for raw in tasks:
            task = FetchTask.decode(raw)
            if task.url.startswith(self.late_host) and self.defers > 0:
                self.defers -= 1
                out.append(Deferred(task, time.time() + 1.2).encode())
                continue
            self.fetched.append((task.url, task.depth))
            links, _ = canonical_links(self.graph.get(task.url, []))
            out.append(Fetched(task, 200, 1, links=list(links.items())).encode())
        return out

    def stats(self) -> dict[str, float]:
        return {}


@pytest.mark.slow
def test_a_late_host_gives_a_shorter_path_to_a_url_found_deeper(redis_url, keys, tmp_path):
    # A's chain reaches x at depth 4 while B is deferred; B's seed links to x
    # directly, so x is at depth 1 and y, z, w below it are within --depth 4.
    chain = [f"{A}/0", f"{A}/1", f"{A}/2", f"{A}/3", f"{A}/x", f"{A}/y", f"{A}/z", f"{A}/w"]
    graph = {a: [b] for a, b in itertools.pairwise(chain)}
    graph[f"{B}/0"] = [f"{A}/x"]
    want = {
        f"{A}/0": 0,
        f"{B}/0": 0,
        f"{A}/1": 1,
        f"{A}/x": 1,
        f"{A}/2": 2,
        f"{A}/y": 2,
        f"{A}/3": 3,
        f"{A}/z": 3,
        f"{A}/w": 4,
    }
    cfg = Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_url,
            "SRCRAWL_JOB": keys.job,
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db",
        }
    )
    start_crawl(
        cfg, [f"{A}/0", f"{B}/0"], CrawlStrategy(max_depth=4, delay=0, delay_factor=0, max_delay=0)
    )
    handler = LateHostHandler(graph, B, defers=3)
    slave = Slave.from_config(cfg, [handler], block_timeout=0.05)
    t = threading.Thread(target=slave.run, daemon=True)
    t.start()
    try:
        assert CrawlMaster.from_config(cfg).run() is True
    finally:
        slave.stopping.set()
        t.join(timeout=10)
    assert handler.defers == 0
    # what the store ends with: each URL's shallowest fetch, or the depth it was improved to
    # (a deeper fetch in flight when the shorter path was found is not made again)
    improved = {fp: d for fp, d in CrawlMaster.from_config(cfg).frontier.improved_depths()}
    shortest: dict[str, int] = {}
    for url, depth in handler.fetched:
        depth = min(depth, improved.get(fingerprint(url), depth))
        shortest[url] = min(depth, shortest.get(url, depth))
    assert shortest == want
    # x was scheduled at depth 4 (the levels did not wait for B), then found at 1: fetched
    # once if its deeper task was still queued (replaced) or in flight, else again
    x_fetches = sorted(d for u, d in handler.fetched if u == f"{A}/x")
    stats = {k.decode(): int(v) for k, v in cfg.redis().hgetall(cfg.keys.stats("crawl")).items()}
    assert stats["depth_improved"] == 1
    assert x_fetches == (
        [1, 4]
        if stats.get("depth_refetch")
        else [4]
        if stats.get("depth_improved_in_flight")
        else [1]
    )
    assert stats.get("refetched", 0) == stats.get("depth_refetch", 0)
    assert stats["pages"] == len(want)
    cfg.close()


def good_site_seconds(web: TestWeb, since: float) -> float:
    """Seconds from ``since`` to the end of the good site's last request."""
    return max(e["end_mono"] for e in logged_requests(web) if e["start_mono"] >= since) - since


# --robots-defer: how long the broken host is deferred after each failed robots.txt
DEFER = 30


@pytest.mark.slow
def test_a_broken_seed_does_not_hold_a_good_site(broken_host, redis_url, keys, tmp_path):
    # --robots-defer 30: the crawl would wait minutes for the broken host's five tries;
    # with nothing else left it ends, names the host and leaves its URL for --resume.
    # A good site held by the broken host waits at least one deferral (DEFER s) for it:
    # the crawls are compared by that unit, not by a ratio a busy machine can break
    log = tmp_path / "access.jsonl"
    opts = [
        "--depth",
        "3",
        "--slaves",
        "1",
        "--delay",
        "0.02",
        "--delay-factor",
        "0",
        "--robots-defer",
        str(DEFER),
        "--fetch-timeout",
        "2",
    ]
    with TestWeb.generate(
        hosts=1, pages=40, seed=11, access_log=log, flush_interval=0.1, slow_seconds=0.5
    ) as web:
        want = web.web.expected_crawl(web.seed_urls, 3)
        env = env_for(redis_url, keys.job + "-alone", tmp_path / "alone")
        t0 = time.monotonic()
        r = srcrawl(["crawl", *web.seed_urls, *opts], env)
        alone_total = time.monotonic() - t0
        assert r.returncode == 0, r.stderr[-3000:]
        alone = good_site_seconds(web, t0)

        env = env_for(redis_url, keys.job, tmp_path)
        t0 = time.monotonic()
        r = srcrawl(["crawl", *web.seed_urls, broken_host, *opts], env)
        beside_total = time.monotonic() - t0
        beside = good_site_seconds(web, t0)
        host = broken_host[7:-1]
        assert r.returncode == 3, r.stderr[-3000:]
        # the broken host was asked once: nobody waited for its second try
        assert Failing.requests.count("/robots.txt") == 1, Failing.requests
        # nor for a deferral: the good site ends, and the crawl, well within one of it
        assert beside - alone < DEFER / 2, (alone, beside)
        assert beside_total - alone_total < DEFER / 2, (alone_total, beside_total)
        assert {p["url"]: p["depth"] for p in stored(env)} == want
        summary = json.loads(r.stdout)
        assert summary["deferred_hosts"] == [host]
        assert "robots_gave_up" not in summary
        assert (
            f"1 host left uncrawled, its robots.txt not to be had: {host} (robots.txt: "
            f"HTTP 500). `srcrawl --job {keys.job} crawl --resume` tries again" in r.stderr
        )
        # --resume asks the broken host again at once, and ends the same way
        asked = Failing.requests.count("/robots.txt")
        t0 = time.monotonic()
        r = srcrawl(["crawl", "--resume"], env)
        assert r.returncode == 3, r.stderr[-3000:]
        assert time.monotonic() - t0 < DEFER  # not after the deferral: at once
        assert Failing.requests.count("/robots.txt") == asked + 1
        assert json.loads(r.stdout)["deferred_hosts"] == [host]


def test_the_store_takes_corrected_depths(store) -> None:
    from srcrawl.sql.pages import Page

    store.put_pages(
        [
            Page(fp=1, url="http://a/1", host="a", depth=4),
            Page(fp=2**62 + 5, url="http://a/2", host="a", depth=3),
        ]
    )
    store.set_depths([(1, 1), (2**62 + 5, 2), (99, 0)])  # 99 is not stored: skipped
    assert {p.fp: p.depth for p in store.get_pages([1, 2**62 + 5, 99])} == {1: 1, 2**62 + 5: 2}
