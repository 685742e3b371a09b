"""The depth record and what the master does with a URL found nearer than scheduled.

Against a real Redis and the real crawl master, fed outcomes as slaves send
them: the packed record's writes and reads, when recording starts and stops,
and that a URL found nearer while its deeper task is still queued is fetched
once (in flight: once, its links at the nearer depth; fetched: again).
"""

from __future__ import annotations

import time

import pytest

from srcrawl.core.urls import fingerprint
from srcrawl.master.crawl_master import CrawlMaster
from srcrawl.master.crawl_run import start_crawl
from srcrawl.master.frontier import Batch
from srcrawl.master.frontier.depth_record import MAX_DEPTH, packed_entries
from srcrawl.queues.crawl_protocol import Deferred, Fetched, FetchTask, canonical_links
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.settings.config import Config

A = "http://127.0.0.1:9200"
B = "http://127.0.0.1:9201"


@pytest.fixture
def master(redis_url, keys, tmp_path):
    cfg = Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_url,
            "SRCRAWL_JOB": keys.job,
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db",
        }
    )
    start_crawl(
        cfg, [f"{A}/0", f"{B}/0"], CrawlStrategy(max_depth=6, delay=0, delay_factor=0, max_delay=0)
    )
    m = CrawlMaster.from_config(cfg)
    m.acquire(wait=False)
    yield m
    m.release()
    cfg.close()


def step(m: CrawlMaster, *outcomes: object) -> None:
    """Send outcomes as a slave would, and let the master process everything in nrq."""
    if outcomes:
        m.queues.nrq.push([o.encode() for o in outcomes])
    while msgs := m.frontier.take(100):
        m.process(msgs)


def hand_out(m: CrawlMaster) -> dict[str, FetchTask]:
    """The tasks the frontier releases now, taken from srq as slaves take them."""
    m.frontier.schedule()
    srq = m.queues.srq.key
    raw = m.client.lrange(srq, 0, -1)
    m.client.delete(srq)
    return {t.url: t for t in map(FetchTask.decode, raw)}


def page(task: FetchTask, *links: str) -> Fetched:
    found, _ = canonical_links([f"{A}/{x}" for x in links])
    return Fetched(task, 200, 1.0, links=list(found.items()))


def next_level(m: CrawlMaster) -> None:
    state = m.frontier.level_state(m.queues.nrq.key)
    assert state.level_done and state.next
    m.levels.advance(lagging=state.lagging > 0)


def queued(m: CrawlMaster, queue: str) -> list[tuple[str, int]]:
    raw = m.client.lrange(m.keys.crawl_queue_prefix + queue, 0, -1)
    return [(t.url, t.depth) for t in map(FetchTask.decode, raw)]


def stats(m: CrawlMaster) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in m.client.hgetall(m.keys.stats("crawl")).items()}


def test_a_url_found_nearer_is_fetched_once_unless_it_was_fetched(master) -> None:
    m = master
    step(m)  # the seeds
    out = hand_out(m)
    late = out[f"{B}/0"]
    step(m, Deferred(late, time.time() + 60, reason="HTTP 500"), page(out[f"{A}/0"], "1"))
    next_level(m)  # B lags: level 1 without it
    step(m, page(hand_out(m)[f"{A}/1"], "2"))
    next_level(m)
    step(m, page(hand_out(m)[f"{A}/2"], "x", "y"))
    next_level(m)  # level 3: A/x, A/y at depth 3
    deep_x = hand_out(m)[f"{A}/x"]  # in flight; A/y still queued
    assert deep_x.depth == 3 and queued(m, deep_x.queue) == [(f"{A}/y", 3)]

    # B answers at last: its seed links to x, y (queued) and 2 (fetched), one hop away
    m.client.zadd(m.keys.crawl_ready, {late.queue: 0})
    late = hand_out(m)[f"{B}/0"]
    step(m, page(late, "x", "y", "2"))
    counts = stats(m)
    assert counts["depth_improved"] == 3
    assert counts["depth_improved_queued"] == counts["depth_improved_in_flight"] == 1
    assert counts["depth_refetch"] == 1
    # y's deeper task is replaced by the nearer one; 2 is fetched again; x is not queued
    assert queued(m, deep_x.queue) == [(f"{A}/y", 1), (f"{A}/2", 1)]
    assert m.frontier.recorded_depths([fingerprint(f"{A}/{u}") for u in "xy2"]) == [1, 1, 1]

    # x's deeper fetch comes back: its links take the nearer depth (1 + 1)
    step(m, page(deep_x, "z"))
    assert (f"{A}/z", 2) in queued(m, deep_x.queue)
    assert dict(m.frontier.improved_depths()) == {fingerprint(f"{A}/{u}"): 1 for u in "xy2"}


def test_the_record_starts_with_the_deferral_and_ends_with_a_strict_level(master) -> None:
    m = master
    record = m.keys.crawl_depths
    fps = {fingerprint(f"{A}/r{i}"): 1 + i % 300 for i in range(3000)}
    m.frontier.commit(Batch(depths=fps, recording=True), b"")
    want = [min(d, MAX_DEPTH) for d in fps.values()]
    assert m.frontier.recorded_depths(list(fps)) == want
    assert m.frontier.recorded_depths([fingerprint(f"{A}/none")]) == [None]
    size = m.client.memory_usage(record)
    assert size < 3000 * 9 + 4096 * 90  # packed: entries plus the buckets' own cost

    step(m)  # the seeds, then a level reached with nothing lagging: the record goes
    out = hand_out(m)
    step(m, page(out[f"{A}/0"], "1"), page(out[f"{B}/0"]))
    next_level(m)
    assert not m.client.exists(record)
    assert m.client.hget(m.keys.crawl_state, "strict") == b"1"
    m.frontier.commit(Batch(depths={1: 3}, recording=False), b"")
    assert not m.client.exists(record)

    # the commit that marks a queue lagging records what it schedules, and so on after
    task = hand_out(m)[f"{A}/1"]
    m.client.hset(m.keys.crawl_state, "level", 2)
    batch = Batch(depths={2: 3}, recording=False)
    batch.done[task.queue] = None
    batch.lag[task.queue] = 1
    m.frontier.commit(batch, b"")
    m.frontier.commit(Batch(depths={3: 4}, recording=False), b"")
    assert m.frontier.recorded_depths([2, 3]) == [3, 4]
    assert packed_entries({2: 3}) == (2).to_bytes(8, "big") + b"\x03"
