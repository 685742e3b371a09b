"""An operator's hold on a crawl, end to end against a real Redis: a paused job's master
hands out nothing (its slaves fetch nothing new) and the crawl completes once resumed; a
host's stored pages fetched again; the jobs and each host's frontier as the portal shows
them."""

from __future__ import annotations

import threading
import time

from srcrawl.core.urls import fingerprint
from srcrawl.master.crawl_control import (
    frontier_hosts,
    jobs,
    pause_crawl,
    paused_since,
    resume_crawl,
)
from srcrawl.master.crawl_master import CrawlMaster
from srcrawl.master.crawl_run import progress, recrawl_host, start_crawl
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.sql.pages import Page

from .test_crawl_master import FAST, GraphHandler, bfs, cfg_for, make_graph, run_slave_thread


def test_a_paused_crawl_fetches_nothing_new_and_completes_once_resumed(
    redis_url, keys, tmp_path
) -> None:
    graph = make_graph(hosts=2, pages=30)
    seeds = ["http://127.0.0.1:9000/p/0", "http://127.0.0.1:9001/p/0"]
    expected = bfs(graph, seeds, 3, {"127.0.0.1:9000", "127.0.0.1:9001"})
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, seeds, FAST)
    pause_crawl(cfg)
    assert paused_since(cfg.redis(), cfg.keys) is not None
    handler = GraphHandler(graph)
    slave, slave_thread = run_slave_thread(cfg, handler)
    master = CrawlMaster.from_config(cfg)
    done: list[bool] = []
    thread = threading.Thread(target=lambda: done.append(master.run()), daemon=True)
    thread.start()
    # the master takes the seeds into its frontier, and hands out nothing
    deadline = time.monotonic() + 30
    while frontier_hosts(cfg).get("127.0.0.1:9001") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # three looks at the flag
    assert handler.fetched == []
    assert cfg.redis().llen(cfg.keys.srq("crawl")) == 0
    hosts = frontier_hosts(cfg)
    assert {h: (q.queued, q.in_flight) for h, q in hosts.items()} == {
        "127.0.0.1:9000": (1, 0),
        "127.0.0.1:9001": (1, 0),
    }
    assert progress(cfg)["queued"] == 2 and not done
    resume_crawl(cfg)
    thread.join(timeout=60)
    slave.stopping.set()
    slave_thread.join(timeout=10)
    assert done == [True]
    assert dict(handler.fetched) == expected
    assert frontier_hosts(cfg) == {}


def test_a_pause_midway_stops_the_hand_out_within_the_backlog(redis_url, keys, tmp_path) -> None:
    # one host, fetched one at a time, a fetch 20 ms: paused while it runs, at most the
    # tasks already handed out (one: one in flight per host) are fetched after the pause
    graph = {
        f"http://127.0.0.1:9000/p/{i}": [f"http://127.0.0.1:9000/p/{i + 1}"] for i in range(60)
    }
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, ["http://127.0.0.1:9000/p/0"], CrawlStrategy(max_depth=60, delay=0))
    handler = GraphHandler(graph, fetch_s=0.02)
    slave, slave_thread = run_slave_thread(cfg, handler)
    master = CrawlMaster.from_config(cfg)
    done: list[bool] = []
    thread = threading.Thread(target=lambda: done.append(master.run()), daemon=True)
    thread.start()
    while len(handler.fetched) < 5:
        time.sleep(0.01)
    pause_crawl(cfg)
    time.sleep(1.0)  # the master has seen the flag (every 0.5 s) and the fetch out ended
    at_pause = len(handler.fetched)
    time.sleep(1.0)
    assert len(handler.fetched) == at_pause < 61 and not done
    resume_crawl(cfg)
    thread.join(timeout=60)
    slave.stopping.set()
    slave_thread.join(timeout=10)
    assert done == [True] and len(handler.fetched) == 61


def test_a_host_is_fetched_again_from_its_stored_pages(redis_url, keys, tmp_path) -> None:
    graph = make_graph(hosts=2, pages=10)
    seeds = ["http://127.0.0.1:9000/p/0", "http://127.0.0.1:9001/p/0"]
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, seeds, FAST)
    handler = GraphHandler(graph)
    slave, slave_thread = run_slave_thread(cfg, handler)
    assert CrawlMaster.from_config(cfg).run()
    # the handler stores no page: the store holds what a real slave would have stored,
    # each page at the depth it was fetched at
    stored = {u: d for u, d in handler.fetched if u.startswith("http://127.0.0.1:9001/")}
    assert stored and max(stored.values()) > 0
    pages = [Page(fingerprint(u), u, "127.0.0.1:9001", depth=d) for u, d in stored.items()]
    cfg.store().put_pages(pages)
    assert recrawl_host(cfg, "127.0.0.1:9001") == len(stored)
    assert recrawl_host(cfg, "127.0.0.1:9999") == 0  # no stored page: nothing queued
    handler.fetched.clear()
    assert CrawlMaster.from_config(cfg).run()
    slave.stopping.set()
    slave_thread.join(timeout=10)
    # the host's pages, each at its own depth: no link is found nearer, none else fetched
    assert dict(handler.fetched) == stored and len(handler.fetched) == len(stored)
    assert progress(cfg)["refetched"] == len(stored)


def test_jobs_are_the_crawls_redis_holds(redis_url, keys, tmp_path) -> None:
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, ["http://127.0.0.1:9000/p/0"], FAST)
    other = cfg.with_job(keys.job + "-other")
    start_crawl(other, ["http://127.0.0.1:9000/p/0"], CrawlStrategy(partitions=2))
    found = jobs(cfg.redis())
    assert keys.job in found and other.job in found
    assert not [j for j in found if "/" in j]  # a partition's state names its job only


def test_a_seed_message_carries_the_depths_of_the_pages_fetched_again() -> None:
    from srcrawl.queues.crawl_protocol import Seed, seed_message
    from srcrawl.queues.envelope import decode, encode

    urls = ["http://a/1", "http://a/2"]
    seed = Seed.from_message(decode(seed_message([], 3, urls, [2, 5])))
    assert [(u, d) for u, _fp, d in seed.again_at()] == [("http://a/1", 2), ("http://a/2", 5)]
    assert [d for *_u, d in Seed.from_message(decode(seed_message([], 3, urls))).again_at()] == [
        0,
        0,
    ]
    # depths that do not match the URLs one to one are not used: the seeds go at depth 0
    again = [[u, fingerprint(u)] for u in urls]
    for depths in ([1], [1, -1], ["1", 2], 7):
        raw = encode("seed", {"urls": [], "strategy": 3, "again": again, "depths": depths})
        assert [d for *_u, d in Seed.from_message(decode(raw)).again_at()] == [0, 0]


def test_srcrawl_status_says_a_job_is_paused(redis_url, keys, tmp_path) -> None:
    from srcrawl.app.status import collect, render

    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, ["http://127.0.0.1:9000/p/0"], FAST)
    assert "PAUSED" not in render(collect(cfg.redis(), cfg.keys))
    pause_crawl(cfg)
    assert "PAUSED since" in render(collect(cfg.redis(), cfg.keys))
    resume_crawl(cfg)
    assert collect(cfg.redis(), cfg.keys)["paused"] is None
