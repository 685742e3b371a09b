"""The seen set's Bloom filter: one hashing per new key, pybloom's bits and snapshots."""

from __future__ import annotations

import io
import random

from pybloom_live import ScalableBloomFilter

from srcrawl.master.frontier.seen import bloom_add


def _bloom() -> ScalableBloomFilter:
    # a small first filter, so that the stream below fills it and two more start
    return ScalableBloomFilter(
        initial_capacity=500, error_rate=1e-4, mode=ScalableBloomFilter.LARGE_SET_GROWTH
    )


def test_adding_once_hashed_is_pybloom_add_bit_for_bit() -> None:
    rng = random.Random(3)
    keys = [rng.randrange(-(1 << 63), 1 << 63) for _ in range(4000)]
    stream = keys + rng.sample(keys, 1500) + [rng.randrange(1 << 62) for _ in range(2000)]
    rng.shuffle(stream)
    ours, theirs = _bloom(), _bloom()
    answers = [(bloom_add(ours, k), theirs.add(k)) for k in stream]
    assert all(a == b for a, b in answers)
    assert sum(1 for a, _ in answers if a) >= 1500  # the repeats were found
    assert len(ours.filters) == len(theirs.filters) >= 3 and len(ours) == len(theirs)
    mine, pybloom = io.BytesIO(), io.BytesIO()
    ours.tofile(mine)
    theirs.tofile(pybloom)
    assert mine.getvalue() == pybloom.getvalue()
