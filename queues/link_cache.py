"""A CLOCK cache of URL fingerprints: drops repeated links before they reach Redis.

CLOCK [URL caching §3.4] approximates LRU with one mark bit per slot. The slots
form a ring with a hand. A hit sets the slot's mark. A miss on a full cache
moves the hand around the ring, clearing marks, until it finds an unmarked
slot; that entry is evicted and the new one takes its place (unmarked: it
earns its mark with its first hit), and the hand moves on. Seed 004 measured
about 80 % hits with 50,000 entries on real crawl traces.

A dict maps fingerprints to slots; a list holds the fingerprint of each slot
and a bytearray the marks, so a lookup is one dict probe and an eviction
clears marks at most once around the ring (amortised O(1)).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from srcrawl.core.defaults import DEFAULT_LINK_CACHE


class ClockCache:
    """A fixed-capacity set of fingerprints with CLOCK replacement; thread-safe.

    Each key keeps the smallest depth it was seen at: a key seen again at a
    smaller depth is a miss (a shorter path the master must hear of, see
    master/frontier/), at the same or a greater depth a hit.
    """

    def __init__(self, capacity: int = DEFAULT_LINK_CACHE) -> None:
        if capacity < 1:
            raise ValueError(f"a CLOCK cache needs at least one slot, not {capacity}")
        self.capacity = capacity
        self._slot_of: dict[int, int] = {}
        self._keys: list[int] = []
        self._depths: list[int] = []
        self._marks = bytearray(capacity)
        self._hand = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, fp: int) -> bool:
        """Membership without touching marks or counters."""
        return fp in self._slot_of

    @property
    def hit_rate(self) -> float:
        """Hits over lookups so far (0.0 before the first lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def seen_or_add(self, fp: int, depth: int = 0) -> bool:
        """True if ``fp`` was cached at ``depth`` or less (a hit, which marks it); else
        remember it at ``depth`` and return False."""
        with self._lock:
            return self._seen_or_add(fp, depth)

    def seen_or_add_many(self, fps: Iterable[int]) -> list[bool]:
        """:meth:`seen_or_add` for each fingerprint in order, under one lock."""
        with self._lock:
            return [self._seen_or_add(fp) for fp in fps]

    def _seen_or_add(self, fp: int, depth: int = 0) -> bool:
        slot = self._slot_of.get(fp)
        if slot is not None:
            self._marks[slot] = 1
            if self._depths[slot] <= depth:
                self.hits += 1
                return True
            self._depths[slot] = depth
            self.misses += 1
            return False
        self.misses += 1
        keys = self._keys
        if len(keys) < self.capacity:
            self._slot_of[fp] = len(keys)
            keys.append(fp)
            self._depths.append(depth)
            return False
        marks = self._marks
        hand = self._hand
        while marks[hand]:
            marks[hand] = 0
            hand += 1
            if hand == self.capacity:
                hand = 0
        del self._slot_of[keys[hand]]
        keys[hand] = fp
        self._depths[hand] = depth
        self._slot_of[fp] = hand
        hand += 1
        self._hand = 0 if hand == self.capacity else hand
        return False

    def stats(self) -> dict[str, float]:
        """Counters for the heartbeat."""
        return {
            "link_cache_hits": self.hits,
            "link_cache_misses": self.misses,
            "link_cache_hit_rate": round(self.hit_rate, 4),
            "link_cache_size": len(self._keys),
        }
