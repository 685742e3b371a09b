"""Host slots (slave/host_slots.py) against a real Redis: two slaves' drivers share a host's
N slots; a slot cools for its politeness wait; a killed slave's slots lapse; a slave that
stops gives its slots back; a Crawl-delay's limit of 1 holds while more are out; a reset
crawl forgets them; on a Redis Cluster one call spans several hosts."""

from __future__ import annotations

import itertools
import time

import pytest

from srcrawl.core.defaults import HOST_SLOT_RETRY, HOST_SLOT_RETRY_MAX
from srcrawl.core.redis_connect import connect
from srcrawl.master.crawl_master import reset_crawl
from srcrawl.slave.host_slots import HostSlots

from .test_crawl_master import cfg_for

HOST = "127.0.0.1:9000"


class Driver:
    """One slave's driver: its HostSlots, and the tasks it has started."""

    def __init__(self, redis_client, keys, politeness_ms: int = 0, hold_s: float = 30.0) -> None:
        self.slots = HostSlots(redis_client, keys, lambda _ms, _d: politeness_ms, lambda: hold_s)
        self.started: list[bytes] = []

    def want(self, *raws: bytes, limit: int = 2, crawl_delay: float | None = None) -> None:
        for raw in raws:
            self.slots.want(raw, HOST, limit, crawl_delay, lambda raw=raw: self.started.append(raw))
        self.slots.run()


def test_two_slaves_hold_a_host_to_its_slots_and_pass_a_freed_one_on(redis_client, keys) -> None:
    a, b = Driver(redis_client, keys), Driver(redis_client, keys)
    a.want(b"a1", b"a2", b"a3")
    b.want(b"b1", b"b2")
    assert a.started == [b"a1", b"a2"] and b.started == []  # oldest first, 2 at most
    assert len(a.slots) == 1 and len(b.slots) == 2
    assert redis_client.zcard(keys.crawl_host_slots(HOST)) == 2
    # a's request ends: its own waiting task takes the slot in the same round trip
    a.slots.done(b"a1", 50.0)
    assert a.slots.due()
    a.slots.run()
    assert a.started == [b"a1", b"a2", b"a3"] and b.started == []
    # another ends with nothing waiting in a: b finds the slot at its next try
    a.slots.done(b"a2", 50.0)
    a.slots.run()
    assert b.slots.wait_s(1.0) <= 0.01  # it tries again within HOST_SLOT_RETRY
    time.sleep(b.slots.wait_s(1.0))
    assert b.slots.due()
    b.slots.run()
    assert b.started == [b"b1"] and len(b.slots) == 1
    assert redis_client.zcard(keys.crawl_host_slots(HOST)) == 2


def _redis_ms(redis_client) -> int:
    """The Redis server's clock (the slots' clock), in ms."""
    seconds, micros = redis_client.time()
    return seconds * 1000 + micros // 1000


def test_a_slot_cools_for_the_politeness_wait_its_request_earned(redis_client, keys) -> None:
    # Times are the Redis server's: the cooling is read from the slot's score, bounded by
    # that clock read on both sides of the call, and its end is brought forward by moving
    # the score, so no margin of this machine's speed is assumed.
    cool_ms = 300_000  # far longer than any stall of a busy machine between two calls
    a = Driver(redis_client, keys, politeness_ms=cool_ms)
    a.want(b"1", b"2", b"3")
    assert a.started == [b"1", b"2"]
    key = keys.crawl_host_slots(HOST)
    held = dict(redis_client.zrange(key, 0, -1, withscores=True))
    before = _redis_ms(redis_client)
    a.slots.done(b"1", 50.0)
    a.slots.run()
    after = _redis_ms(redis_client)
    assert a.started == [b"1", b"2"]  # the slot is not free before its wait is over
    scores = dict(redis_client.zrange(key, 0, -1, withscores=True))
    [cooling] = [slot for slot in scores if scores[slot] != held[slot]]
    assert before + cool_ms <= scores[cooling] <= after + cool_ms, (before, scores, after)
    a.slots.run()
    assert a.started == [b"1", b"2"]
    # the wait is over (its end moved to a moment passed): the slot is free at the next try
    redis_client.zadd(key, {cooling: _redis_ms(redis_client) - 1}, xx=True)
    a.slots.run()
    assert a.started == [b"1", b"2", b"3"]
    # the set lives as long as its last slot, and no longer
    assert 0 < redis_client.pttl(key) <= 30_000 + 1000


def test_a_killed_slaves_slots_lapse_after_the_longest_request(redis_client, keys) -> None:
    dead = Driver(redis_client, keys, hold_s=0.3)
    dead.want(b"d1", b"d2")
    assert dead.started == [b"d1", b"d2"]  # then the process is killed: no done() ever
    alive = Driver(redis_client, keys)
    alive.want(b"x")
    assert alive.started == []
    time.sleep(0.35)
    alive.slots.run()
    assert alive.started == [b"x"]


def test_a_stopping_slave_gives_its_slots_back_and_forgets_its_waiting_tasks(
    redis_client, keys
) -> None:
    a = Driver(redis_client, keys)
    a.want(b"1", b"2", b"3")
    a.slots.close()
    assert len(a.slots) == 0 and not a.slots.busy
    assert redis_client.zcard(keys.crawl_host_slots(HOST)) == 0
    b = Driver(redis_client, keys)
    b.want(b"b1", b"b2")
    assert b.started == [b"b1", b"b2"]


def test_a_crawl_delay_learnt_while_tasks_are_out_lets_them_go_one_at_a_time(
    redis_client, keys
) -> None:
    a = Driver(redis_client, keys, politeness_ms=0)
    a.want(b"1", b"2", limit=4)
    assert a.started == [b"1", b"2"]
    # robots.txt now says Crawl-delay: the host's limit is 1 for the tasks still to start
    a.want(b"3", b"4", limit=1, crawl_delay=0.5)
    assert a.started == [b"1", b"2"]
    for raw in (b"1", b"2"):
        a.slots.done(raw, 10.0)
    a.slots.run()
    assert a.started == [b"1", b"2", b"3"]  # one, and only when none other is out
    a.slots.done(b"3", 10.0)
    a.slots.run()
    assert a.started == [b"1", b"2", b"3", b"4"]


def test_a_reset_crawl_starts_with_every_slot_free(redis_url, keys, tmp_path) -> None:
    cfg = cfg_for(redis_url, keys.job, tmp_path)
    a = Driver(cfg.redis(), cfg.keys)
    a.want(b"1", b"2")
    assert cfg.redis().exists(cfg.keys.crawl_host_slots(HOST))
    reset_crawl(cfg)
    assert not cfg.redis().exists(cfg.keys.crawl_host_slots(HOST))


@pytest.mark.slow
def test_the_slots_of_several_hosts_in_one_call_on_a_redis_cluster(redis_cluster, keys) -> None:
    # the slot sets share the job's hash tag: one script call spans hosts on one node
    client = connect(redis_cluster.url)
    slots = HostSlots(client, keys, lambda _ms, _d: 0, lambda: 30.0)
    started: list[bytes] = []
    for raw, host in ((b"a1", "a:1"), (b"a2", "a:1"), (b"b1", "b:1"), (b"b2", "b:1")):
        slots.want(raw, host, 1, None, lambda raw=raw: started.append(raw))
    slots.run()
    assert started == [b"a1", b"b1"]
    slots.done(b"a1", 10.0)
    slots.done(b"b1", 10.0)
    slots.run()
    assert started == [b"a1", b"b1", b"a2", b"b2"]
    assert client.zcard(keys.crawl_host_slots("a:1")) == 1


def test_a_slave_finding_no_slot_tries_less_often_until_it_gets_one(redis_client, keys) -> None:
    a, b = Driver(redis_client, keys), Driver(redis_client, keys)
    a.want(b"a1", b"a2")
    b.want(b"b1", b"b2")  # a first try: nothing
    waits = [b.slots.wait_s(1.0)]
    for _ in range(4):
        b.slots.run()
        waits.append(b.slots.wait_s(1.0))
    assert all(later >= before - 0.002 for before, later in itertools.pairwise(waits))
    assert waits[-1] <= HOST_SLOT_RETRY_MAX
    assert waits[-1] > 4 * HOST_SLOT_RETRY  # Redis is asked a few times a second, not 200
    a.slots.done(b"a1", 10.0)
    a.slots.run()
    b.slots.run()
    assert b.started == [b"b1"]
    assert b.slots.wait_s(1.0) <= HOST_SLOT_RETRY  # a slot came: quick tries again
