"""The srq/nrq/trq protocol against a real Redis."""

from __future__ import annotations

import logging
import signal
import subprocess
import time

import pytest
import redis

from srcrawl.core.keys import Keys
from srcrawl.core.outage import RedisOutage, wait_out_outages
from srcrawl.queues.protocol import PhaseQueues, new_worker_id
from srcrawl.queues.tags import TagCounter
from srcrawl.queues.work_queue import WorkQueue
from srcrawl.queues.workers import Worker, reap, workers

from .conftest import HELPERS


def test_keys_share_one_hash_tag(keys: Keys) -> None:
    q = PhaseQueues(redis.Redis(), keys, "index")
    assert q.srq.key == f"srcrawl:{{{keys.job}}}:index:srq"
    assert q.nrq.key.startswith(f"srcrawl:{{{keys.job}}}:")
    assert q.srq.processing_key("slave-1").startswith(f"srcrawl:{{{keys.job}}}:")


def test_batch_push_pop_ack_in_order(redis_client, keys) -> None:
    q = PhaseQueues(redis_client, keys, "crawl")
    msgs = [b"m%d" % i for i in range(2500)]
    q.srq.push(msgs)
    assert len(q.srq) == 2500
    first = q.srq.pop("w", 1000)
    assert first == msgs[:1000]
    assert q.srq.pending("w") == first
    assert q.srq.ack("w", first, [b"r"] * 1000, q.nrq)
    assert q.srq.pending("w") == []
    assert len(q.nrq) == 1000
    rest = q.srq.pop("w", 5000)
    assert rest == msgs[1000:]
    assert q.srq.pop("w", 10) == []


def test_out_of_order_ack_removes_exactly_those_tasks(redis_client, keys) -> None:
    q = WorkQueue(redis_client, keys.srq("crawl"))
    q.push([b"a", b"b", b"c", b"a"])
    assert q.pop("w", 4) == [b"a", b"b", b"c", b"a"]
    assert q.ack("w", [b"c", b"a"])
    assert q.pending("w") == [b"b", b"a"]


def test_push_front_puts_messages_at_the_head_in_order(redis_client, keys) -> None:
    q = WorkQueue(redis_client, keys.srq("crawl"))
    q.push([b"x"])
    q.push([b"a", b"b"], front=True)
    assert q.pop("w", 3) == [b"a", b"b", b"x"]


def test_blocking_pop_waits_for_the_first_message(redis_client, keys) -> None:
    q = WorkQueue(redis_client, keys.srq("crawl"))
    t0 = time.monotonic()
    assert q.pop("w", 10, timeout=0.3) == []
    assert time.monotonic() - t0 >= 0.25
    other = redis.Redis(connection_pool=redis_client.connection_pool)

    def later() -> None:
        time.sleep(0.2)
        WorkQueue(other, q.key).push([b"1", b"2", b"3"])

    import threading

    threading.Thread(target=later).start()
    got = q.pop("w", 10, timeout=5)
    got += q.pop("w", 10)
    assert sorted(got) == [b"1", b"2", b"3"]
    assert sorted(q.pending("w")) == [b"1", b"2", b"3"]


def test_requeue_returns_pending_to_the_head(redis_client, keys) -> None:
    q = WorkQueue(redis_client, keys.srq("crawl"))
    q.push([b"1", b"2", b"3", b"4"])
    q.pop("dead", 2)
    assert q.requeue("dead") == 2
    assert q.pop("alive", 4) == [b"1", b"2", b"3", b"4"]


def test_ack_after_requeue_is_refused_and_pushes_nothing(redis_client, keys) -> None:
    q = PhaseQueues(redis_client, keys, "crawl")
    q.srq.push([b"t"])
    tasks = q.srq.pop("slow", 1)
    q.srq.requeue("slow")  # the master presumed it dead
    assert q.srq.ack("slow", tasks, [b"result"], q.nrq) is False
    assert len(q.nrq) == 0
    retry = q.srq.pop("other", 1)
    assert q.srq.ack("other", retry, [b"result"], q.nrq) is True
    assert q.nrq.pop("master", 10) == [b"result"]


def test_grouped_ack_answers_for_each_group(redis_client, keys) -> None:
    q = PhaseQueues(redis_client, keys, "crawl")
    q.srq.push([b"a", b"b"])
    early = q.srq.pop("w", 2)
    q.srq.requeue("w")  # presumed dead while it worked on a and b
    q.srq.push([b"c", b"d", b"e"])
    q.srq.pop("other", 2)  # a and b went to another consumer
    late = q.srq.pop("w", 3)  # c, d, e
    assert late == [b"c", b"d", b"e"]
    groups = [(early, [b"A+B"]), ([b"e"], [b"E1", b"E2"]), ([b"c"], [b"C"]), ([], [b"note"])]
    assert q.srq.ack_groups("w", groups, q.nrq) == [False, True, True, True]
    # only the groups still held answer, out of pop order, each with all its results
    assert q.nrq.pop("master", 10) == [b"E1", b"E2", b"C", b"note"]
    assert q.srq.pending("w") == [b"d"]
    assert q.srq.ack_groups("w", [], q.nrq) == []


_TAKE_TAGS = """
import sys, redis
from srcrawl.core.keys import Keys
from srcrawl.queues.tags import TagCounter
tags = TagCounter(redis.Redis.from_url(sys.argv[1]), Keys(sys.argv[2]).trq("crawl"))
print(" ".join(str(tags.next("batch")) for _ in range(int(sys.argv[3]))))
"""


@pytest.mark.slow
def test_tags_are_unique_across_processes(redis_url, keys, python) -> None:
    procs = [
        subprocess.Popen(
            [python, "-c", _TAKE_TAGS, redis_url, keys.job, "200"], stdout=subprocess.PIPE
        )
        for _ in range(4)
    ]
    got = [int(t) for p in procs for t in p.communicate(timeout=60)[0].split()]
    assert sorted(got) == list(range(1, 801))
    tags = TagCounter(redis.Redis.from_url(redis_url), keys.trq("crawl"))
    assert list(tags.reserve("batch", 5)) == [801, 802, 803, 804, 805]


def test_worker_ids_are_unique(redis_client, keys) -> None:
    ids = {new_worker_id(redis_client, keys) for _ in range(50)}
    assert len(ids) == 50


def test_heartbeat_expiry_and_reap(redis_client, keys) -> None:
    q = PhaseQueues(redis_client, keys, "crawl")
    live = Worker(redis_client, keys, "live", [q.srq], ttl=30)
    dead = Worker(redis_client, keys, "dead", [q.srq], ttl=0.2)
    live.beat({"pages": 3})
    dead.beat()
    q.srq.push([b"a", b"b", b"c"])
    q.srq.pop("dead", 2)
    q.srq.pop("live", 1)
    time.sleep(0.4)
    found = {w.id: w for w in workers(redis_client, keys)}
    assert found["live"].alive and found["live"].stats["pages"] == 3
    assert not found["dead"].alive
    assert reap(redis_client, keys) == {"dead": {q.srq.key: 2}}
    assert [w.id for w in workers(redis_client, keys)] == ["live"]
    assert q.srq.pending("live") == [b"c"]
    assert q.srq.pop("x", 5) == [b"a", b"b"]


def test_retire_hands_back_unacknowledged_tasks(redis_client, keys) -> None:
    q = PhaseQueues(redis_client, keys, "crawl")
    w = Worker(redis_client, keys, "w", [q.srq])
    w.beat()
    q.srq.push([b"a", b"b"])
    q.srq.pop("w", 2)
    assert w.retire() == 2
    assert workers(redis_client, keys) == []
    assert len(q.srq) == 2


@pytest.mark.slow
def test_worker_killed_between_pop_and_ack_loses_and_doubles_nothing(
    redis_url, redis_client, keys, python
) -> None:
    q = PhaseQueues(redis_client, keys, "crawl")
    tasks = [b"task-%04d" % i for i in range(600)]
    q.srq.push(tasks)
    script = str(HELPERS / "echo_worker.py")
    victim = subprocess.Popen([python, script, redis_url, keys.job, "victim", "25", "0.3"])
    try:
        # wait until it has acked at least one batch and holds another
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if len(q.nrq) >= 25 and q.srq.pending("victim"):
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the worker never got going")
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
    finally:
        if victim.poll() is None:
            victim.kill()
    held = q.srq.pending("victim")
    assert held, "the killed worker should have held unacknowledged tasks"
    time.sleep(1.3)  # its heartbeat TTL is 1 s
    assert reap(redis_client, keys) == {"victim": {q.srq.key: len(held)}}
    subprocess.run(
        [python, script, redis_url, keys.job, "rescuer", "50", "0", "--burst"],
        check=True,
        timeout=60,
    )
    results = q.nrq.pop("master", 10_000)
    assert len(results) == len(tasks)  # none duplicated
    assert sorted(results) == sorted(b"done:" + t for t in tasks)  # none lost
    assert len(q.srq) == 0 and q.srq.pending("rescuer") == []


def test_a_pop_whose_reply_was_lost_moves_nothing_twice(redis_url, keys, monkeypatch) -> None:
    # Redis ran the pop and went away before its reply arrived: the client sends it
    # again; the messages the first one moved must not be stranded in the processing list
    client = redis.Redis.from_url(redis_url)
    wait_out_outages(client, RedisOutage(logging.getLogger("test")))
    q = WorkQueue(client, keys.srq("index"))
    q.push([b"a", b"b", b"c"])
    real, lost = client.parse_response, []

    def reply_lost_once(conn, command_name, **options):  # type: ignore[no-untyped-def]
        reply = real(conn, command_name, **options)
        if command_name == "EVALSHA" and not lost:
            lost.append(reply)
            raise redis.ConnectionError("Connection reset by peer")
        return reply

    monkeypatch.setattr(client, "parse_response", reply_lost_once)
    assert q.pop("c1", 2) == [b"a", b"b"] and lost
    assert client.lrange(q.processing_key("c1"), 0, -1) == [b"a", b"b"]
    assert client.lrange(q.key, 0, -1) == [b"c"]
    assert q.pop("c1", 2) == [b"c"]  # the next pop takes what is left
    client.close()
