"""The crawl master against a real Redis, with slaves that answer from a known graph.

The slaves here are the real slave runtime with a handler that, instead of
HTTP, looks the page's links up in a generated graph (the HTTP side has its
own tests). What is under test is the master: exact depth-bounded set, each
URL scheduled once, one task in flight per host, and surviving SIGKILL.
"""

from __future__ import annotations

import collections
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from srcrawl.core.errors import LeaseHeld
from srcrawl.master.crawl_master import CrawlMaster
from srcrawl.master.crawl_run import add_seeds, progress, start_crawl
from srcrawl.master.frontier import Batch, Frontier
from srcrawl.queues.crawl_protocol import Fetched, FetchTask, canonical_links
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.envelope import decode
from srcrawl.queues.lease import MasterLease
from srcrawl.settings.config import Config
from srcrawl.slave.runtime import Slave


def make_graph(hosts: int, pages: int, seed: int = 7) -> dict[str, list[str]]:
    rng = random.Random(seed)
    urls = [f"http://127.0.0.1:{9000 + h}/p/{i}" for h in range(hosts) for i in range(pages)]
    graph = {}
    for u in urls:
        # power-law-ish: low page numbers are hubs
        targets = [urls[min(int(rng.paretovariate(1.2)) - 1, len(urls) - 1)] for _ in range(3)]
        targets += rng.sample(urls, 3)
        targets.append("http://127.0.0.1:9999/out-of-scope")
        targets.append("javascript:void(0)")
        targets.append(u.replace("/p/", "/P/../p/"))  # another spelling of itself
        graph[u] = targets
    return graph


def bfs(
    graph: dict[str, list[str]], seeds: list[str], depth: int, hosts: set[str]
) -> dict[str, int]:
    from srcrawl.core.urls import InvalidURL, canonicalize, host_of

    found = {s: 0 for s in seeds}
    frontier = list(seeds)
    for d in range(1, depth + 1):
        nxt = []
        for u in frontier:
            for t in graph.get(u, []):
                try:
                    c = canonicalize(t)
                except InvalidURL:
                    continue
                if host_of(c) in hosts and c not in found:
                    found[c] = d
                    nxt.append(c)
        frontier = nxt
    return found


class GraphHandler:
    phase = "crawl"
    batch_size = 1
    threads = 4

    def __init__(self, graph: dict[str, list[str]], fetch_s: float = 0.0) -> None:
        self.graph = graph
        self.fetch_s = fetch_s
        self.fetched: list[tuple[str, int]] = []
        self.active: collections.Counter[str] = collections.Counter()
        self.max_active = 0
        self.lock = threading.Lock()

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        out = []
        for raw in tasks:
            t = decode(raw)
            with self.lock:
                self.active[t.get("q")] += 1
                self.max_active = max(self.max_active, self.active[t.get("q")])
                self.fetched.append((t.get("url"), t.get("depth")))
            time.sleep(self.fetch_s)
            with self.lock:
                self.active[t.get("q")] -= 1
            links, invalid = canonical_links(self.graph.get(t.get("url"), []))
            page = Fetched(
                FetchTask.decode(raw),
                200 if links else 404,
                1,
                links=list(links.items()),
                invalid=invalid,
            )
            out.append(page.encode())
        return out

    def stats(self) -> dict[str, float]:
        return {}


def cfg_for(redis_url: str, job: str, tmp_path) -> Config:
    return Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_url,
            "SRCRAWL_JOB": job,
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db",
        }
    )


def run_slave_thread(cfg: Config, handler: GraphHandler) -> tuple[Slave, threading.Thread]:
    slave = Slave.from_config(cfg, [handler], block_timeout=0.05)
    t = threading.Thread(target=slave.run, daemon=True)
    t.start()
    return slave, t


def crawl_with(cfg: Config, handler: GraphHandler) -> None:
    """Run the job's crawl to completion: a master, and one slave in a thread with ``handler``."""
    slave, t = run_slave_thread(cfg, handler)
    assert CrawlMaster.from_config(cfg).run()
    slave.stopping.set()
    t.join(timeout=10)


FAST = CrawlStrategy(max_depth=3, delay=0, delay_factor=0, max_delay=0)


def test_crawl_is_exactly_the_depth_bounded_set(redis_url, keys, tmp_path) -> None:
    graph = make_graph(hosts=4, pages=150)
    seeds = ["http://127.0.0.1:9000/p/0", "http://127.0.0.1:9002/p/5"]
    hosts = {f"127.0.0.1:{9000 + h}" for h in range(4)}
    expected = bfs(graph, seeds, 3, {"127.0.0.1:9000", "127.0.0.1:9002"})
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, seeds, FAST)
    handler = GraphHandler(graph)
    slave, t = run_slave_thread(cfg, handler)
    master = CrawlMaster.from_config(cfg)
    assert master.run() is True
    slave.stopping.set()
    t.join(timeout=10)
    fetched = dict(handler.fetched)
    assert len(handler.fetched) == len(fetched), "a URL was fetched twice"
    assert fetched == expected
    assert hosts  # the other two hosts are reachable but out of the seed scope
    p = progress(cfg)
    assert p["pages"] == len(expected) and p["queued"] == 0 and p["in_flight"] == 0
    assert p["out_of_scope"] > 0 and p["invalid_urls"] > 0 and p["duplicates"] > 0
    assert cfg.store().get_job(keys.job, "crawl")["state"] == "complete"


def test_a_new_depth_level_is_scheduled_at_once(redis_url, keys, tmp_path) -> None:
    # a chain of one page per level: the crawl is its 12 level changes. The master used
    # to wait on nrq (200 ms, to Redis' next timer tick) after releasing each level
    levels = 12
    graph = {
        f"http://127.0.0.1:9000/p/{i}": [f"http://127.0.0.1:9000/p/{i + 1}"] for i in range(levels)
    }
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    strategy = CrawlStrategy(max_depth=levels - 1, delay=0, delay_factor=0, max_delay=0)
    start_crawl(cfg, ["http://127.0.0.1:9000/p/0"], strategy)
    handler = GraphHandler(graph)
    started = time.monotonic()
    crawl_with(cfg, handler)
    elapsed = time.monotonic() - started
    assert [d for _url, d in handler.fetched] == list(range(levels))
    assert elapsed < levels * 0.1, elapsed  # at least 12 × 0.2 s when a level waited


def test_hosts_with_the_most_urls_go_first_into_a_bounded_srq(redis_client, keys) -> None:
    srq = keys.srq("crawl")
    lease = MasterLease(redis_client, keys.master_lease("crawl"), "test", 10)
    lease.acquire()
    frontier = Frontier(lease, keys, srq, keys.nrq("crawl"), "nrq-processing-test")
    batch = Batch()
    for host, n in (("a", 1), ("b", 5), ("c", 3), ("d", 2)):
        batch.now += [FetchTask(f"http://{host}/{i}", i, 1, host) for i in range(n)]
    frontier.commit(batch, b"")
    # room for two tasks: the two longest queues, longest first; the others wait
    assert frontier.schedule(backlog=2) == (2, -1)
    assert [decode(t).get("q") for t in redis_client.lrange(srq, 0, -1)] == ["b", "c"]
    assert frontier.schedule(backlog=2) == (0, -1)  # srq full: nothing more
    redis_client.delete(srq)
    released, _ = frontier.schedule()  # no bound: every due queue that is not in flight
    assert released == 2
    assert [decode(t).get("q") for t in redis_client.lrange(srq, 0, -1)] == ["d", "a"]


def test_one_request_in_flight_per_host_and_delay_between(redis_url, keys, tmp_path) -> None:
    graph = make_graph(hosts=2, pages=20)
    seeds = ["http://127.0.0.1:9000/p/0", "http://127.0.0.1:9001/p/0"]
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, seeds, CrawlStrategy(max_depth=2, delay=0.05, delay_factor=0, max_delay=1))
    handler = GraphHandler(graph, fetch_s=0.01)
    handler.threads = 8
    starts: dict[str, list[float]] = collections.defaultdict(list)
    original = handler.handle

    def timed(tasks: list[bytes]) -> list[bytes]:
        q = decode(tasks[0]).get("q")
        starts[q].append(time.monotonic())
        out = original(tasks)
        starts[q].append(time.monotonic())
        return out

    handler.handle = timed  # type: ignore[method-assign]
    slave, t = run_slave_thread(cfg, handler)
    assert CrawlMaster.from_config(cfg).run()
    slave.stopping.set()
    t.join(timeout=10)
    assert handler.max_active == 1
    for q, times in starts.items():
        # consecutive (start, end) pairs: the next start is ≥ 50 ms after the last end
        gaps = [times[i + 1] - times[i] for i in range(1, len(times) - 1, 2)]
        assert gaps and min(gaps) >= 0.045, (q, min(gaps))


def test_hash_policy_spreads_one_host_over_buckets(redis_url, keys, tmp_path) -> None:
    graph = make_graph(hosts=1, pages=60)
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(
        cfg,
        ["http://127.0.0.1:9000/p/0"],
        CrawlStrategy(
            max_depth=4, delay=0, delay_factor=0, max_delay=0, queue_policy="hash", hash_buckets=8
        ),
    )
    handler = GraphHandler(graph, fetch_s=0.02)
    handler.threads = 8
    crawl_with(cfg, handler)
    assert handler.max_active == 1  # per bucket
    assert len({q for q in handler.active}) > 1


def test_seeds_added_later_extend_the_scope(redis_url, keys, tmp_path) -> None:
    graph = make_graph(hosts=2, pages=10)
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(
        cfg,
        ["http://127.0.0.1:9000/p/0"],
        CrawlStrategy(max_depth=1, delay=0, delay_factor=0, max_delay=0),
    )
    add_seeds(cfg, ["http://127.0.0.1:9001/p/3"])
    handler = GraphHandler(graph)
    slave, t = run_slave_thread(cfg, handler)
    assert CrawlMaster.from_config(cfg).run()
    slave.stopping.set()
    t.join(timeout=10)
    expected = bfs(
        graph,
        ["http://127.0.0.1:9000/p/0", "http://127.0.0.1:9001/p/3"],
        1,
        {"127.0.0.1:9000", "127.0.0.1:9001"},
    )
    assert dict(handler.fetched) == expected


def test_a_second_master_refuses_to_start(redis_url, keys, tmp_path) -> None:
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, ["http://127.0.0.1:9000/"], FAST)
    first = CrawlMaster.from_config(cfg)
    first.acquire()
    with pytest.raises(LeaseHeld):
        CrawlMaster.from_config(cfg).acquire(wait=False)
    first.release()


@pytest.mark.slow
def test_master_killed_with_sigkill_resumes_exactly(redis_url, keys, tmp_path) -> None:
    graph = make_graph(hosts=3, pages=300, seed=11)
    seeds = [f"http://127.0.0.1:{9000 + h}/p/0" for h in range(3)]
    expected = bfs(graph, seeds, 4, {f"127.0.0.1:{9000 + h}" for h in range(3)})
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(cfg, seeds, CrawlStrategy(max_depth=4, delay=0, delay_factor=0, max_delay=0))
    handler = GraphHandler(graph, fetch_s=0.002)
    slave, t = run_slave_thread(cfg, handler)
    env = cfg.child_env()
    cmd = [sys.executable, "-m", "srcrawl.app.cli", "master", "start"]
    kills = 0
    for threshold in (len(expected) // 4, len(expected) // 2, 3 * len(expected) // 4):
        master = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while len(handler.fetched) < threshold and time.monotonic() < deadline:
            time.sleep(0.005)
        master.send_signal(signal.SIGKILL)
        master.wait()
        kills += 1
    master = subprocess.run(cmd, env=env, timeout=120, capture_output=True)
    assert master.returncode == 0, master.stderr
    slave.stopping.set()
    t.join(timeout=10)
    counts = collections.Counter(u for u, _ in handler.fetched)
    assert [u for u, n in counts.items() if n > 1] == []  # nothing scheduled twice
    assert dict(handler.fetched) == expected  # nothing lost, exact depths
    assert kills == 3
