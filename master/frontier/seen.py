"""The URL-seen test: a Bloom filter (pybloom-live).

It survives a master restart, ``kill -9`` included: every fingerprint the
master adds is appended to a journal in Redis in the same atomic step that
schedules its URL (see Frontier.commit), and from time to time the whole
filter is written as a snapshot and the journal cleared. Loading = snapshot
+ journal replay, so the filter never forgets a scheduled URL and never holds
one that was not scheduled.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable

import redis
from pybloom_live import ScalableBloomFilter

from srcrawl.core.defaults import DEFAULT_BLOOM_CAPACITY, DEFAULT_SNAPSHOT_EVERY
from srcrawl.core.keys import Keys

Transaction = Callable[[Callable[[redis.client.Pipeline], object]], object]
"""Runs the writes a function queues on a pipeline as one transaction."""


def bloom_add(bloom: ScalableBloomFilter, key: int) -> bool:
    """``bloom.add(key)`` (True if ``key`` was in it already), hashing ``key`` once for the
    filter it goes into instead of twice.

    pybloom's ScalableBloomFilter.add asks ``key in self`` (hashing it for every
    filter) and then adds it to the newest filter, which hashes it again: half of a
    master's CPU for a new URL. Here the newest filter's bit positions are made
    once and serve both; the bits, counts and snapshots are pybloom's own (a test
    compares them with ``bloom.add``).
    """
    filters = bloom.filters
    if not filters or filters[-1].count >= filters[-1].capacity:
        return bool(bloom.add(key))  # a new filter starts: pybloom sizes it
    last = filters[-1]
    bits, width = last.bitarray, last.bits_per_slice
    positions = [
        offset + k
        for offset, k in zip(range(0, last.num_bits, width), last.make_hashes(key), strict=True)
    ]
    if all(bits[i] for i in positions):
        return True
    if any(key in f for f in filters[:-1]):
        return True
    for i in positions:
        bits[i] = True
    last.count += 1
    return False


class SeenSet:
    """Fingerprints of every URL the crawl has scheduled."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        error_rate: float,
        capacity: int = DEFAULT_BLOOM_CAPACITY,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    ) -> None:
        self.client = client
        self.keys = keys
        self.error_rate = error_rate
        self.capacity = capacity
        self.snapshot_every = snapshot_every
        self._new_bloom()
        self._pending: list[int] = []
        self.since_snapshot = 0

    def _new_bloom(self) -> None:
        self.bloom = ScalableBloomFilter(
            initial_capacity=self.capacity,
            error_rate=self.error_rate,
            mode=ScalableBloomFilter.LARGE_SET_GROWTH,
        )

    def load(self) -> int:
        """Rebuild from the snapshot and the journal; return the journal entries replayed."""
        self._new_bloom()
        self._pending = []
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self.keys.seen_snapshot)
        pipe.lrange(self.keys.seen_journal, 0, -1)
        snapshot, journal = pipe.execute()
        if snapshot:
            self.bloom = ScalableBloomFilter.fromfile(io.BytesIO(snapshot))
        replayed = 0
        for packed in journal:
            for fp in struct.unpack(f"<{len(packed) // 8}q", packed):
                self.bloom.add(fp)
                replayed += 1
        self.since_snapshot = replayed
        return replayed

    def add(self, fp: int) -> bool:
        """Mark ``fp`` seen; True if it was new. New ones go to the pending journal entry."""
        if bloom_add(self.bloom, fp):
            return False
        self._pending.append(fp)
        return True

    def take_journal(self) -> bytes:
        """The packed fingerprints added since the last call, for the commit."""
        packed = struct.pack(f"<{len(self._pending)}q", *self._pending)
        self.since_snapshot += len(self._pending)
        self._pending = []
        return packed

    def snapshot_due(self) -> bool:
        return self.since_snapshot >= self.snapshot_every

    def snapshot(self, transaction: Transaction | None = None) -> int:
        """Write the whole filter and clear the journal it covers; return its size in bytes.

        Call only between commits: then everything in the filter is committed.
        ``transaction`` runs the two writes (the master's is fenced by its lease);
        by default they are a plain MULTI.
        """
        buf = io.BytesIO()
        self.bloom.tofile(buf)

        def write(pipe: redis.client.Pipeline) -> None:
            pipe.set(self.keys.seen_snapshot, buf.getvalue())
            pipe.delete(self.keys.seen_journal)

        if transaction is not None:
            transaction(write)
        else:
            with self.client.pipeline(transaction=True) as pipe:
                write(pipe)
                pipe.execute()
        self.since_snapshot = 0
        return buf.tell()

    def __len__(self) -> int:
        return len(self.bloom)
