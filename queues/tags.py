"""``trq``: unique tags handed out atomically (slave ids, batch serials)."""

from __future__ import annotations

import redis


class TagCounter:
    """Counters in one Redis hash; every call returns tags no one else ever got."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key

    def next(self, kind: str) -> int:
        """One new tag of ``kind`` (1, 2, 3, …)."""
        return int(self.client.hincrby(self.key, kind, 1))

    def reserve(self, kind: str, n: int) -> range:
        """``n`` consecutive new tags of ``kind`` in one round trip."""
        if n < 1:
            raise ValueError("reserve at least one tag")
        end = int(self.client.hincrby(self.key, kind, n))
        return range(end - n + 1, end + 1)

    def current(self, kind: str) -> int:
        """The last tag handed out (0 if none)."""
        return int(self.client.hget(self.key, kind) or 0)
