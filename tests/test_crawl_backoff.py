"""A failed fetch backs off alone unless its host failed: the frontier's scripts against a
real Redis, and the master's judgement of which failure is the host's."""

from __future__ import annotations

import time

from srcrawl.master.frontier import Batch, Requeue, now_ms
from srcrawl.master.frontier.politeness import host_failed
from srcrawl.queues.crawl_protocol import ERROR_CONNECT, FetchTask, Retry
from srcrawl.queues.envelope import decode

from .test_crawl_per_host import HOST, _frontier


def _taken(redis_client, srq: str) -> list[str]:
    urls = [decode(t).get("url") for t in redis_client.lrange(srq, 0, -1)]
    redis_client.delete(srq)
    return urls


def test_a_url_that_failed_alone_does_not_hold_its_queue(redis_client, keys) -> None:
    frontier, srq = _frontier(redis_client, keys)
    tasks = [FetchTask(f"http://{HOST}/{i}", i + 1, 1, HOST) for i in range(3)]
    frontier.commit(Batch(now=list(tasks)), b"")
    assert frontier.schedule()[0] == 1 and _taken(redis_client, srq) == [tasks[0].url]
    # /0 answered 500: it waits 400 ms, its queue goes on at once (politeness 0)
    now = now_ms()
    failed = Requeue(FetchTask(tasks[0].url, 1, 1, HOST, failed=1), now + 400, slot=now)
    frontier.commit(Batch(backoff=[failed]), b"")
    assert frontier.level_state(keys.nrq("crawl")).level_done is False  # it holds the level
    released, due = frontier.schedule()
    assert released == 1 and _taken(redis_client, srq) == [tasks[1].url]
    assert due == now + 400  # the master wakes for the back-off's end
    frontier.commit(Batch(done={HOST: now_ms()}), b"")
    released, due = frontier.schedule()
    assert released == 1 and _taken(redis_client, srq) == [tasks[2].url]
    frontier.commit(Batch(done={HOST: now_ms()}), b"")
    released, due = frontier.schedule()
    assert released == 0 and due == now + 400
    time.sleep(max(0, due - now_ms()) / 1000 + 0.01)
    assert frontier.schedule()[0] == 1 and _taken(redis_client, srq) == [tasks[0].url]
    assert redis_client.zcard(keys.crawl_backoff) == 0


def test_a_host_that_failed_holds_its_queue(redis_client, keys) -> None:
    frontier, srq = _frontier(redis_client, keys)
    tasks = [FetchTask(f"http://{HOST}/{i}", i + 1, 1, HOST) for i in range(2)]
    frontier.commit(Batch(now=list(tasks)), b"")
    assert frontier.schedule()[0] == 1
    _taken(redis_client, srq)
    now = now_ms()
    again = Requeue(FetchTask(tasks[0].url, 1, 1, HOST, failed=1), now + 300, slot=now, held=True)
    frontier.commit(Batch(retry=[again]), b"")
    released, due = frontier.schedule()
    assert released == 0 and due >= now + 300  # nothing of the host until then
    assert redis_client.zscore(keys.crawl_backoff_queues, HOST) == now + 300
    time.sleep((due - now_ms()) / 1000 + 0.01)
    assert frontier.schedule()[0] == 1 and _taken(redis_client, srq) == [tasks[0].url]


def test_which_failures_are_the_hosts() -> None:
    task = FetchTask(f"http://{HOST}/0", 1, 1, HOST)
    assert host_failed(Retry(task, 0, ERROR_CONNECT, 5))
    assert host_failed(Retry(task, 429, None, 5))
    assert host_failed(Retry(task, 503, None, 5, retry_after=30))
    assert not host_failed(Retry(task, 503, None, 5))  # no Retry-After: this URL's trouble
    assert not host_failed(Retry(task, 500, None, 5))
    assert not host_failed(Retry(task, 0, "timeout", 1000))
