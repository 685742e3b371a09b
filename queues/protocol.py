"""The srq / nrq / trq triple of one phase of one job [Redis engine §2]."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from srcrawl.core.keys import Keys
from srcrawl.queues.tags import TagCounter
from srcrawl.queues.work_queue import WorkQueue


class PhaseQueues:
    """``srq`` (master → slaves), ``nrq`` (slaves → master) and ``trq`` (tags)."""

    def __init__(self, client: redis.Redis, keys: Keys, phase: str) -> None:
        self.phase = phase
        self.srq = WorkQueue(client, keys.srq(phase))
        self.nrq = WorkQueue(client, keys.nrq(phase))
        self.trq = TagCounter(client, keys.trq(phase))

    # what a slave needs of its phase's queues (queues/partitions.py has the crawl's)
    @property
    def srqs(self) -> list[WorkQueue]:
        return [self.srq]

    def pop(self, consumer: str, count: int, timeout: float = 0.0) -> list[bytes]:
        return self.srq.pop(consumer, count, timeout=timeout)

    @property
    def left(self) -> int:
        """Tasks srq still held after the last :meth:`pop`."""
        return self.srq.left

    def ack_groups(
        self, consumer: str, groups: Sequence[tuple[Sequence[bytes], Sequence[bytes]]]
    ) -> list[bool]:
        return self.srq.ack_groups(consumer, groups, self.nrq)

    def route(self, routed: dict[int, list[bytes]]) -> None:
        """Unpartitioned: nothing is ever routed elsewhere."""


def new_worker_id(client: redis.Redis, keys: Keys, role: str = "slave") -> str:
    """A worker id unique in the job, from the job-wide tag counter."""
    return f"{role}-{TagCounter(client, keys.tags).next(role)}"
