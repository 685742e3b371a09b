"""`--per-host N`: a host's URLs over 4N frontier queues, at most N of its requests in flight.

Four levels, all against a real Redis: the frontier's scripts alone (HOST_TASKS_OUT × N
of a host's tasks out, parked queues, a Crawl-delay learnt while tasks are out), the
slaves' host slots alone (N at most, cooling, lapsing), the crawl master with slaves
answering from a known graph through the host slots (exact set, at most N per host),
and `srcrawl crawl` over the served test web, whose access log shows what the server
saw in flight at once.
"""

from __future__ import annotations

import collections
import json
import threading
import time

import pytest

from srcrawl.core.defaults import HOST_TASKS_OUT, QUEUES_PER_LIMIT
from srcrawl.core.errors import ConfigError
from srcrawl.master.commands import resumed_strategy
from srcrawl.master.crawl_run import start_crawl
from srcrawl.master.frontier import Batch, Frontier, Requeue, now_ms
from srcrawl.master.frontier.politeness import queue_for
from srcrawl.queues.crawl_protocol import FetchTask
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.envelope import decode
from srcrawl.queues.lease import MasterLease
from srcrawl.slave.host_slots import HostSlots
from srcrawl.testweb import TestWeb
from srcrawl.testweb.accesslog import gaps, most_in_flight

from .conftest import cli_env, logged_requests, run_cli, stored_pages
from .test_crawl import expected
from .test_crawl_master import GraphHandler, bfs, cfg_for, crawl_with, make_graph

HOST = "127.0.0.1:9000"
OUT = HOST_TASKS_OUT


def _frontier(redis_client, keys) -> tuple[Frontier, str]:
    srq = keys.srq("crawl")
    lease = MasterLease(redis_client, keys.master_lease("crawl"), "test", 10)
    lease.acquire()
    return Frontier(lease, keys, srq, keys.nrq("crawl"), "nrq-processing-test"), srq


def _out(redis_client, srq: str) -> list[str]:
    """The queues of the tasks in srq, which are taken from it (a slave has them now)."""
    tasks = redis_client.lrange(srq, 0, -1)
    redis_client.delete(srq)
    return [decode(t).get("q") for t in tasks]


def test_strategy_spreads_a_host_over_per_host_queues() -> None:
    one, four = CrawlStrategy(), CrawlStrategy(per_host=4)
    assert queue_for(one, HOST, 12345) == HOST  # the default: the queues as they always were
    # over QUEUES_PER_LIMIT queues per request in flight: each depth level's longest is shorter
    assert {queue_for(four, HOST, fp) for fp in range(200)} == {
        f"{HOST}#{k}" for k in range(4 * QUEUES_PER_LIMIT)
    }
    assert CrawlStrategy.from_json(four.to_json()).per_host == 4
    with pytest.raises(ConfigError):
        CrawlStrategy(per_host=0)
    with pytest.raises(ConfigError):
        CrawlStrategy(per_host=4, queue_policy="hash")


def test_per_host_cannot_change_on_resume() -> None:
    # the URLs already queued are spread over the crawl's --per-host queues
    with pytest.raises(ConfigError, match="--per-host cannot change on --resume"):
        resumed_strategy(CrawlStrategy(per_host=4), {"per_host": 8})
    assert resumed_strategy(CrawlStrategy(per_host=4), {"delay": 0.0}).per_host == 4


def test_frontier_holds_a_host_to_its_limit(redis_client, keys) -> None:
    frontier, srq = _frontier(redis_client, keys)
    queues = [f"{HOST}#{k}" for k in range(4)]
    batch = Batch()
    batch.now += [
        FetchTask(f"http://{HOST}/{k}/{i}", i, 0, q) for k, q in enumerate(queues) for i in range(3)
    ]
    frontier.commit(batch, b"")
    # robots.txt not read yet: one request, the other queues parked until it is back
    assert frontier.schedule() == (1, -1)
    [first] = _out(redis_client, srq)
    assert frontier.schedule() == (0, -1)
    # it came back with robots.txt read, no Crawl-delay: the host may have 4 requests in
    # flight, so 4 × HOST_TASKS_OUT tasks out (the 4 queues have one each out at most)
    frontier.commit(Batch(done={first: now_ms()}, limits={HOST: 4}), b"")
    released, _ = frontier.schedule()
    assert released == 4 and sorted(_out(redis_client, srq)) == queues
    # a Crawl-delay is learnt while 4 are out: none goes until all are back
    frontier.commit(Batch(done={queues[0]: now_ms()}, limits={HOST: 1}), b"")
    for q in queues[1:3]:
        assert frontier.schedule() == (0, -1)
        frontier.commit(Batch(done={q: now_ms()}), b"")
    assert frontier.schedule() == (0, -1)
    # the last one is back, its Crawl-delay (200 ms) holds for every queue of the host
    back = now_ms()
    frontier.commit(Batch(done={queues[3]: back + 200}), b"")
    released, due = frontier.schedule()
    assert released == 0 and due >= back + 200
    time.sleep((due - now_ms()) / 1000 + 0.01)
    assert frontier.schedule()[0] == 1
    assert frontier.schedule()[0] == 0  # and one at a time from now on (no task beyond it)
    assert redis_client.hgetall(keys.crawl_host_inflight) == {HOST.encode(): b"1"}


def _queued(frontier: Frontier, lengths: dict[str, int], limit: int) -> None:
    """Queues of HOST holding ``lengths`` tasks each, the host allowed ``limit`` in flight."""
    batch = Batch(limits={HOST: limit})
    batch.now += [
        FetchTask(f"http://{HOST}/{q}/{i}", hash((q, i)) % 10**9, 0, q)
        for q, n in lengths.items()
        for i in range(n)
    ]
    frontier.commit(batch, b"")


def test_frontier_wakes_as_many_parked_queues_as_slots_free_longest_first(
    redis_client, keys
) -> None:
    frontier, srq = _frontier(redis_client, keys)
    out = 2 * OUT  # a host allowed 2 requests has 2 × HOST_TASKS_OUT tasks out
    n = out + 6
    lengths = {f"{HOST}#{k}": k + 1 for k in range(n)}  # the last the longest
    _queued(frontier, lengths, 2)
    assert frontier.schedule()[0] == out
    assert sorted(_out(redis_client, srq)) == sorted(f"{HOST}#{k}" for k in range(6, n))
    parked = keys.crawl_parked_prefix + HOST
    assert redis_client.scard(parked) == 6
    # one task back: one free, so one parked queue is woken (the longest, #5), not all
    # six to be parked again; the queue back itself still holds the most
    last, first_out = f"{HOST}#{n - 1}", f"{HOST}#6"
    frontier.commit(Batch(done={last: now_ms()}), b"")
    assert redis_client.scard(parked) == 5
    assert frontier.schedule()[0] == 1
    assert _out(redis_client, srq) == [last]
    frontier.commit(Batch(done={first_out: now_ms()}), b"")
    assert frontier.schedule()[0] == 1
    assert _out(redis_client, srq) == [f"{HOST}#5"]  # 6 tasks left in #6, 6 in #5: a tie
    assert int(redis_client.hget(keys.crawl_host_inflight, HOST)) == out


def test_frontier_holds_each_slot_for_its_politeness_wait(redis_client, keys) -> None:
    # 4 queues per slot: the host's delay holds its slots, not only its queues, so the
    # host gets no more requests per delay than with one queue per slot
    frontier, srq = _frontier(redis_client, keys)
    _queued(frontier, {f"{HOST}#{k}": 2 for k in range(4 * OUT)}, 2)
    assert frontier.schedule()[0] == 2 * OUT
    first, second, *_ = _out(redis_client, srq)
    back = now_ms()
    frontier.commit(Batch(done={first: back + 300}), b"")
    released, due = frontier.schedule()
    # queues are due, but the other tasks are out and this one's turn waits out its delay
    assert released == 0 and back + 300 <= due <= back + 400
    frontier.commit(Batch(done={second: now_ms()}), b"")  # no wait: its slot is free
    assert frontier.schedule()[0] == 1
    assert frontier.schedule()[0] == 0
    time.sleep((due - now_ms()) / 1000 + 0.01)
    assert frontier.schedule()[0] == 1  # the first slot is free again
    assert int(redis_client.hget(keys.crawl_host_inflight, HOST)) == 2 * OUT


def test_frontier_robots_read_frees_the_other_slots_at_once(redis_client, keys) -> None:
    frontier, srq = _frontier(redis_client, keys)
    _queued(frontier, {f"{HOST}#{k}": 2 for k in range(8)}, 1)  # robots.txt not read yet
    assert frontier.schedule()[0] == 1
    [first] = _out(redis_client, srq)
    # robots.txt read (the task goes back to its queue for 300 ms): that slot waits them
    # out, the host's two others are free at once
    task = FetchTask(f"http://{HOST}/again", 7, 0, first)
    frontier.commit(Batch(retry=[Requeue(task, now_ms() + 300)], limits={HOST: 3}), b"")
    assert frontier.schedule()[0] == 3 * OUT - 1
    assert frontier.schedule()[0] == 0


@pytest.mark.parametrize("per_host", [1, 4])
def test_crawl_with_per_host_is_exact_and_holds_the_limit(
    redis_url, keys, tmp_path, per_host
) -> None:
    graph = make_graph(hosts=2, pages=150)
    seeds = ["http://127.0.0.1:9000/p/0", "http://127.0.0.1:9001/p/0"]
    want = bfs(graph, seeds, 3, {"127.0.0.1:9000", "127.0.0.1:9001"})
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    start_crawl(
        cfg,
        seeds,
        CrawlStrategy(max_depth=3, delay=0, delay_factor=0, max_delay=0, per_host=per_host),
    )
    handler = PerHostHandler(graph, fetch_s=0.01, slots=_slots(cfg), per_host=per_host)
    handler.threads = 16
    crawl_with(cfg, handler)
    fetched = dict(handler.fetched)
    # each URL fetched once, at its BFS depth, though the levels overlapped: a level's
    # tail still in flight when the next one started (links it finds at the new level
    # replace the deeper tasks they shorten, still queued for the level after)
    assert len(handler.fetched) == len(fetched) and fetched == want
    stats = cfg.redis().hgetall(cfg.keys.stats("crawl"))
    assert int(stats.get(b"levels_overlapped", 0)) >= 1
    assert handler.max_active == 1  # per queue, as always
    # per host: up to N requests, and reached, while more tasks than that were out
    assert max(handler.host_max.values()) == per_host
    if per_host > 1:
        assert max(handler.host_waiting.values()) >= 1
    assert redis_client_left(cfg) == {}


def _slots(cfg) -> HostSlots:
    return HostSlots(cfg.redis(), cfg.keys, lambda _ms, _delay: 0, lambda: 30.0)


class PerHostHandler(GraphHandler):
    """The graph's slave, its requests taking host slots as the crawl's slaves do
    (slave/host_slots.py, one instance shared by its threads), counting the most
    requests in flight per host and the most tasks waiting for a slot."""

    def __init__(
        self, graph: dict[str, list[str]], fetch_s: float, slots: HostSlots, per_host: int
    ) -> None:
        super().__init__(graph, fetch_s)
        self.slots = slots
        self.per_host = per_host
        self.slots_lock = threading.Lock()
        self.hosts: collections.Counter[str] = collections.Counter()
        self.host_max: collections.Counter[str] = collections.Counter()
        self.host_waiting: collections.Counter[str] = collections.Counter()

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        return [self._one(raw) for raw in tasks]

    def _one(self, raw: bytes) -> bytes:
        q = decode(raw).get("q")
        host, sep, _k = q.partition("#")
        if sep:
            started = threading.Event()
            with self.slots_lock:
                self.slots.want(raw, host, self.per_host, None, started.set)
                self.host_waiting[host] = max(self.host_waiting[host], len(self.slots))
            while not started.is_set():
                with self.slots_lock:
                    self.slots.run()
                started.wait(0.002)
        with self.lock:
            self.hosts[host] += 1
            self.host_max[host] = max(self.host_max[host], self.hosts[host])
        try:
            return super().handle([raw])[0]
        finally:
            with self.lock:
                self.hosts[host] -= 1
            if sep:
                with self.slots_lock:
                    self.slots.done(raw, 0.0)
                    self.slots.run()


def redis_client_left(cfg) -> dict:
    """What the frontier still counts in flight per host once the crawl is complete."""
    return cfg.redis().hgetall(cfg.keys.crawl_host_inflight)


PER_HOST = 4


@pytest.fixture(scope="module")
def slow_web(tmp_path_factory):
    """Four hosts (one with a Crawl-delay) whose responses take 40 ms: requests overlap."""
    log = tmp_path_factory.mktemp("web") / "access.jsonl"
    with TestWeb.generate(
        hosts=4,
        pages=40,
        seed=3,
        latency_ms=40,
        slow_seconds=0.3,
        crawl_delay=0.05,
        robots_failures=0,
        large_bytes=100_000,
        access_log=log,
    ) as tw:
        yield tw


@pytest.mark.slow
def test_access_log_shows_at_most_per_host_requests_in_flight(
    slow_web, redis_url, keys, tmp_path
) -> None:
    seeds = slow_web.seed_urls
    env = cli_env(redis_url, keys.job, tmp_path)
    started = time.monotonic()
    args = [
        "--depth",
        "3",
        "--slaves",
        "2",
        "--fetches",
        "8",
        "--per-host",
        str(PER_HOST),
        "--delay",
        "0",
        "--delay-factor",
        "0",
        "--max-delay",
        "0",
        "--fetch-timeout",
        "2",
        "--robots-defer",
        "0.3",
    ]
    r = run_cli(["crawl", *seeds, *args], env)
    assert r.returncode == 0, r.stderr[-3000:]
    pages = stored_pages(env)
    want = expected(slow_web, seeds, 3)
    assert len(pages) == len({p["url"] for p in pages})
    assert {p["url"]: p["depth"] for p in pages} == want  # exactly the BFS set and depths
    assert json.loads(r.stdout)["pages"] == len(want)

    entries = [e for e in logged_requests(slow_web) if e["start_mono"] >= started - 1]
    most = most_in_flight(entries)
    delayed = {h.index for h in slow_web.web.hosts if h.crawl_delay}
    assert delayed and set(most) == {h.index for h in slow_web.web.hosts}
    for host, n in most.items():
        assert n <= (1 if host in delayed else PER_HOST), (host, n)
    # more than one at once was reached: this test fails if --per-host did nothing
    assert max(n for host, n in most.items() if host not in delayed) > 1
    for host in delayed:  # and a Crawl-delay host kept its delay between any two requests
        assert min(gaps(entries)[host]) >= slow_web.web.hosts[host].crawl_delay - 0.005
