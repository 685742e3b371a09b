"""The crawl's partitions: ranges of a 64-bit hash of the host [USTC thesis ch.3 §6.1].

A crawl with ``--partitions P`` divides the 64-bit hash space of host names
into P equal ranges. Partition p owns every host whose hash falls in its
range, and with the host every URL on it: its frontier queues, its seen
test, its counters and its nrq/srq live under the partition's own keys
(``Keys.partition``), and one master holds its lease at a time. A host is in
exactly one partition, so per-host politeness, robots.txt and page caps stay
exact; a link is routed by its host to the partition that owns it.

P = 1 is the unpartitioned crawl: its one partition's keys are the job's own.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Callable, Sequence

import redis

from srcrawl.core.defaults import PARTITION_POLL, PARTITION_REFRESH
from srcrawl.core.keys import Keys
from srcrawl.core.urls import host_of
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.work_queue import WorkQueue

_SPACE = 1 << 64


def host_hash(host: str) -> int:
    """The host's place in the 64-bit hash space (unsigned, stable across processes)."""
    return int.from_bytes(hashlib.blake2b(host.encode(), digest_size=8).digest(), "big")


@functools.lru_cache(maxsize=1 << 16)  # hosts are few beside their URLs
def partition_of_host(host: str, partitions: int) -> int:
    """The partition that owns ``host`` among ``partitions`` equal ranges of the hash space."""
    if partitions == 1:
        return 0
    return host_hash(host) * partitions // _SPACE


def partition_of_url(url: str, partitions: int) -> int:
    """The partition that owns the canonical ``url``'s host."""
    return 0 if partitions == 1 else partition_of_host(host_of(url), partitions)


def range_of(p: int, partitions: int) -> tuple[int, int]:
    """The hash range [low, high) partition ``p`` owns."""
    return -(-p * _SPACE // partitions), -(-(p + 1) * _SPACE // partitions)


def crawl_partitions(client: redis.Redis, keys: Keys) -> int:
    """How many partitions the job's crawl has (1 when it has no crawl yet)."""
    from srcrawl.queues.crawl_strategy import load

    strategy = load(client, keys)
    return strategy.partitions if strategy is not None else 1


def partition_keys(client: redis.Redis, keys: Keys) -> list[Keys]:
    """The keys of every partition of the job's crawl."""
    return keys.job_keys.partitions(crawl_partitions(client, keys))


class PartitionedQueues:
    """The crawl's srq/nrq as a slave sees them: one pair per partition.

    A slave pops from every partition's srq (one at a time, from a rotating
    start: Redis Cluster has no pop across slots; when all are empty it
    blocks on one of them for at most PARTITION_POLL seconds) and
    acknowledges each task into the nrq of the partition it came from. With
    one partition this is the job's own srq/nrq, popped as before. The
    partitions are read from the strategy document again while the slave is
    idle, so a slave outlives a crawl started anew with another --partitions.
    """

    def __init__(self, client: redis.Redis, keys: Keys, phase: str = "crawl") -> None:
        self.client = client
        self.keys = keys.job_keys
        self.phase = phase
        self.parts: list[PhaseQueues] = []
        self._origin: dict[bytes, list[int]] = {}
        self._lock = threading.Lock()  # the feeder notes where tasks came from, the acker reads
        self._turn = 0
        self._checked = 0.0
        self.on_change: Callable[[list[WorkQueue]], None] | None = None
        self.refresh(force=True)

    @property
    def srqs(self) -> list[WorkQueue]:
        return [q.srq for q in self.parts]

    def refresh(self, *, force: bool = False, consumer: str | None = None) -> bool:
        """Follow the strategy's partition count (at most every PARTITION_REFRESH s);
        True when it changed. ``consumer``'s tasks of the old partitions go back first."""
        now = time.monotonic()
        if not force and now - self._checked < PARTITION_REFRESH:
            return False
        self._checked = now
        n = crawl_partitions(self.client, self.keys)
        if len(self.parts) == n:
            return False
        if consumer is not None:
            for q in self.parts:
                q.srq.requeue(consumer)
        self.parts = [PhaseQueues(self.client, k, self.phase) for k in self.keys.partitions(n)]
        self._origin.clear()
        if self.on_change is not None:
            self.on_change(self.srqs)
        return True

    def pop(self, consumer: str, count: int, timeout: float = 0.0) -> list[bytes]:
        """Up to ``count`` tasks from the partitions' srqs (see the class doc)."""
        if len(self.parts) == 1:
            items = self.parts[0].srq.pop(consumer, count, timeout=timeout)
            if not items and timeout > 0:
                self.refresh(consumer=consumer)
            return items
        got: list[bytes] = []
        n = len(self.parts)
        for i in range(n):
            p = (self._turn + i) % n
            items = self.parts[p].srq.pop(consumer, count - len(got))
            self._note(items, p)
            got += items
            if len(got) >= count:
                break
        self._turn = (self._turn + 1) % n
        if got or timeout <= 0:
            return got
        p = self._turn
        items = self.parts[p].srq.pop(consumer, count, timeout=min(timeout, PARTITION_POLL))
        self._note(items, p)
        if not items:
            self.refresh(consumer=consumer)
        return items

    @property
    def left(self) -> int:
        """Tasks the partitions' srqs still held after this slave's last pop of each."""
        return sum(q.srq.left for q in self.parts)

    def _note(self, items: list[bytes], p: int) -> None:
        with self._lock:
            for raw in items:
                self._origin.setdefault(raw, []).append(p)

    def _partition_of(self, raw: bytes) -> int:
        with self._lock:
            taken = self._origin.get(raw)
            if not taken:
                return 0
            p = taken.pop()
            if not taken:
                del self._origin[raw]
            return p

    def ack_groups(
        self, consumer: str, groups: Sequence[tuple[Sequence[bytes], Sequence[bytes]]]
    ) -> list[bool]:
        """Acknowledge each group (its tasks come from one partition) into its partition's
        nrq, with its results; per group, whether it was still this consumer's."""
        if len(self.parts) == 1:
            q = self.parts[0]
            return q.srq.ack_groups(consumer, groups, q.nrq)
        by_part: dict[int, list[int]] = {}
        for i, (tasks, _) in enumerate(groups):
            p = self._partition_of(tasks[0]) if tasks else 0
            by_part.setdefault(p, []).append(i)
        out = [False] * len(groups)
        for p, idx in by_part.items():
            q = self.parts[p]
            accepted = q.srq.ack_groups(consumer, [groups[i] for i in idx], q.nrq)
            for i, ok in zip(idx, accepted, strict=True):
                out[i] = ok
        return out

    def route(self, routed: dict[int, list[bytes]]) -> None:
        """Push messages to the nrq of the partitions they are for (before an ack)."""
        for p, messages in routed.items():
            if messages and p < len(self.parts):
                self.parts[p].nrq.push(messages)
