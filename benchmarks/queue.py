"""``srcrawl bench queue``: messages/s through push, reliable pop and ack."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import redis

from srcrawl.core.keys import Keys, last_pop_key
from srcrawl.queues.protocol import PhaseQueues


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@dataclass
class QueueBenchmark:
    messages: int
    batch: int
    size: int
    push_s: float
    pop_ack_s: float
    redis_cpu_s: float
    round_trips: int

    @property
    def wall_s(self) -> float:
        return self.push_s + self.pop_ack_s

    def render(self) -> str:
        return "\n".join(
            [
                f"queue benchmark: {self.messages} messages of {self.size} B, batch {self.batch}",
                f"  push            {self.push_s:8.3f} s  "
                f"{self.messages / self.push_s:12,.0f} msg/s",
                f"  pop + ack       {self.pop_ack_s:8.3f} s  "
                f"{self.messages / self.pop_ack_s:12,.0f} msg/s",
                f"  end to end      {self.wall_s:8.3f} s  "
                f"{self.messages / self.wall_s:12,.0f} msg/s",
                f"  Redis CPU time  {self.redis_cpu_s:8.3f} s  ({self.round_trips} round trips)",
            ]
        )


def run_queue_benchmark(
    client: redis.Redis, *, messages: int = 100_000, batch: int = 1000, size: int = 64
) -> QueueBenchmark:
    """Push ``messages`` to a scratch job's srq, then pop and ack them in batches.

    Each ack also pushes one result per task into ``nrq``, as slaves do, so
    the figure includes the result traffic.
    """
    keys = Keys(f"bench-queue-{os.getpid()}-{time.time_ns()}")
    queues = PhaseQueues(client, keys, "crawl")
    payload = [(b"%010d" % i).ljust(size, b".") for i in range(messages)]
    trips = 0
    try:
        cpu0 = _redis_cpu(client)
        t0 = time.perf_counter()
        queues.srq.push(payload)
        trips += 1
        t1 = time.perf_counter()
        got = 0
        while got < messages:
            tasks = queues.srq.pop("bench", batch)
            queues.srq.ack("bench", tasks, tasks, queues.nrq)
            trips += 2
            got += len(tasks)
            if not tasks:
                raise RuntimeError("queue ran dry before every message was popped")
        t2 = time.perf_counter()
        cpu1 = _redis_cpu(client)
        if len(queues.nrq) != messages or queues.srq.pending("bench"):
            raise RuntimeError("benchmark lost or kept messages")
    finally:
        srq = queues.srq
        # the pop's own record too (queues/work_queue.py): nothing of the benchmark stays
        client.delete(
            srq.key, queues.nrq.key, srq.processing_key("bench"), last_pop_key(srq.key, "bench")
        )
    return QueueBenchmark(messages, batch, size, t1 - t0, t2 - t1, cpu1 - cpu0, trips)
