"""The CLOCK cache: second-chance eviction order, counters, hit rate on a skewed stream."""

from __future__ import annotations

import random
import threading
from collections import OrderedDict

import pytest

from srcrawl.queues.link_cache import ClockCache


def test_hits_and_misses_are_counted() -> None:
    c = ClockCache(4)
    assert [c.seen_or_add(x) for x in (1, 2, 1, 3, 2, 2)] == [False, False, True, False, True, True]
    assert (c.hits, c.misses, len(c)) == (3, 3, 3)
    assert c.hit_rate == 0.5
    assert ClockCache(4).hit_rate == 0.0


def test_an_unmarked_entry_is_evicted_first_in_ring_order() -> None:
    c = ClockCache(3)
    for x in (1, 2, 3):
        c.seen_or_add(x)
    c.seen_or_add(4)  # nothing marked: the hand is at slot 0, so 1 goes
    assert 1 not in c and {2, 3, 4} <= {x for x in (2, 3, 4) if x in c}
    c.seen_or_add(5)  # the hand moved on to slot 1: 2 goes
    assert 2 not in c and all(x in c for x in (3, 4, 5))


def test_a_hit_earns_a_second_chance() -> None:
    c = ClockCache(3)
    for x in (1, 2, 3):
        c.seen_or_add(x)
    assert c.seen_or_add(1)  # mark 1
    c.seen_or_add(4)  # hand clears 1's mark, passes it, evicts 2
    assert 1 in c and 2 not in c and 3 in c and 4 in c
    c.seen_or_add(5)  # hand at slot 2: 3 is unmarked and goes
    assert 3 not in c and 1 in c
    c.seen_or_add(6)  # hand wraps to slot 0: 1 lost its mark on the last pass
    assert 1 not in c and all(x in c for x in (4, 5, 6))


def test_when_every_slot_is_marked_the_hand_goes_all_the_way_round() -> None:
    c = ClockCache(3)
    for x in (1, 2, 3):
        c.seen_or_add(x)
    for x in (1, 2, 3):
        assert c.seen_or_add(x)
    c.seen_or_add(4)  # clears all three marks, back at slot 0: 1 goes
    assert 1 not in c and all(x in c for x in (2, 3, 4))


def test_the_size_never_exceeds_the_capacity() -> None:
    c = ClockCache(100)
    rng = random.Random(3)
    for _ in range(10_000):
        c.seen_or_add(rng.getrandbits(64))
        assert len(c) <= 100
    assert len(c) == 100 and c.misses == 10_000


def _lru_hit_rate(stream: list[int], capacity: int) -> float:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for x in stream:
        if x in cache:
            hits += 1
            cache.move_to_end(x)
        else:
            cache[x] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits / len(stream)


def test_hit_rate_on_a_skewed_link_stream_is_close_to_lru() -> None:
    # Links follow a Zipf-like popularity (navigation links repeat on every
    # page, most article links appear once or twice), as in the traces of [URL caching].
    rng = random.Random(42)
    population = 200_000
    weights = [1 / (i + 1) ** 1.1 for i in range(population)]
    stream = rng.choices(range(population), weights=weights, k=100_000)
    c = ClockCache(5_000)
    for x in stream:
        c.seen_or_add(x)
    lru = _lru_hit_rate(stream, 5_000)
    assert c.hits + c.misses == len(stream)
    assert c.hit_rate > 0.5
    assert abs(c.hit_rate - lru) < 0.03, (c.hit_rate, lru)
    # A cache too small to hold the popular links does much worse.
    small = ClockCache(50)
    small.seen_or_add_many(stream)
    assert small.hit_rate < c.hit_rate - 0.15


def test_many_at_once_equals_one_by_one() -> None:
    rng = random.Random(9)
    stream = [rng.randrange(500) for _ in range(5000)]
    a, b = ClockCache(64), ClockCache(64)
    assert a.seen_or_add_many(stream) == [b.seen_or_add(x) for x in stream]
    assert (a.hits, a.misses) == (b.hits, b.misses)


def test_threads_share_one_cache_consistently() -> None:
    c = ClockCache(1000)
    rngs = [random.Random(t) for t in range(4)]
    streams = [[rng.randrange(3000) for _ in range(20_000)] for rng in rngs]
    threads = [threading.Thread(target=c.seen_or_add_many, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.hits + c.misses == 80_000 and len(c) == 1000
    assert sorted(c._slot_of.values()) == list(range(1000))
    assert all(c._keys[slot] == fp for fp, slot in c._slot_of.items())


def test_stats_and_bad_capacity() -> None:
    c = ClockCache(2)
    c.seen_or_add_many([1, 1, 2])
    assert c.stats() == {
        "link_cache_hits": 1,
        "link_cache_misses": 2,
        "link_cache_hit_rate": 0.3333,
        "link_cache_size": 2,
    }
    with pytest.raises(ValueError):
        ClockCache(0)


def test_a_key_seen_again_nearer_a_seed_is_a_miss_and_further_away_a_hit() -> None:
    cache = ClockCache(4)
    assert cache.seen_or_add(7, 3) is False
    assert cache.seen_or_add(7, 3) is True  # the same depth: a repeat
    assert cache.seen_or_add(7, 5) is True  # further away: a repeat
    assert cache.seen_or_add(7, 1) is False  # a shorter path: news
    assert cache.seen_or_add(7, 2) is True  # the depth kept is the smallest
    for fp in range(10, 20):  # evicted, then seen again: a miss at any depth
        cache.seen_or_add(fp, 0)
    assert cache.seen_or_add(7, 9) is False
