"""What the portal reads of the cluster: ``srcrawl status``'s snapshot plus the store.

Read at request time from Redis and the store; nothing is cached but the
crawl's recent page counts, kept to show its pages/s over the last minutes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from typing import Any

import redis

from srcrawl.app import status as job_status
from srcrawl.core.defaults import DEFAULT_MAX_DELAY
from srcrawl.core.telemetry import live_processes, redis_memory
from srcrawl.queues.partitions import partition_keys
from srcrawl.queues.workers import process_stats
from srcrawl.settings.config import Config

LONGEST_QUEUES = 10
QUEUES_LOOKED_AT = 5000  # frontier queues whose length is read for the longest-queues table
RATE_SAMPLES = 60  # (time, pages) samples kept for the crawl's recent pages/s


def store_summary(cfg: Config) -> dict[str, Any]:
    """The store's part of ``srcrawl status --json``, plus the index and rank progress."""
    store = cfg.store()
    indexed = store.indexed_pages()
    return {
        "db": cfg.db.redacted(),
        "pages": store.count("pages"),
        "links": store.count("links"),
        "size_bytes": store.size_bytes(),
        "indexed": indexed,
        "ranked": store.count("ranks"),
    }


def longest_queues(client: redis.Redis, cfg: Config, n: int = LONGEST_QUEUES) -> list[dict]:
    """The frontier queues (hosts) holding the most URLs, longest first (of every
    partition of a partitioned crawl)."""
    found: list[tuple[str, int]] = []
    for k in partition_keys(client, cfg.keys):
        names = client.zrange(k.crawl_ready, 0, QUEUES_LOOKED_AT - 1)
        if not names:
            continue
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.llen(k.crawl_queue(name.decode()))
        found += [
            (name.decode(), int(length)) for name, length in zip(names, pipe.execute(), strict=True)
        ]
    ranked = sorted(found, key=lambda nl: -nl[1])[:n]
    return [{"queue": name, "urls": length} for name, length in ranked if length]


class CrawlRate:
    """The crawl's pages/s over the last minutes, from its counter sampled at each look."""

    def __init__(self, samples: int = RATE_SAMPLES) -> None:
        self._samples: deque[tuple[float, int]] = deque(maxlen=samples)
        self._lock = threading.Lock()

    def add(self, pages: int, now: float | None = None) -> list[dict]:
        """Record the counter; the pages/s between consecutive samples, oldest first."""
        now = time.time() if now is None else now
        with self._lock:
            if self._samples and pages < self._samples[-1][1]:
                self._samples.clear()  # a new crawl of the job: counters restarted
            if not self._samples or now - self._samples[-1][0] >= 1.0:
                self._samples.append((now, pages))
            samples = list(self._samples)
        return [
            {"at": round(t1, 3), "pages_per_s": round((p1 - p0) / (t1 - t0), 2)}
            for (t0, p0), (t1, p1) in zip(samples, samples[1:], strict=False)  # noqa: RUF007
        ]


def snapshot(cfg: Config, rate: CrawlRate | None = None) -> dict[str, Any]:
    """What ``srcrawl status --json`` returns, with the longest queues and recent pages/s."""
    client = cfg.redis()
    snap = job_status.collect(client, cfg.keys)
    snap["store"] = store_summary(cfg)
    snap["longest_queues"] = longest_queues(client, cfg)
    crawl = snap["phases"].get("crawl", {}).get("counters", {})
    fetched = int(crawl.get("pages", 0)) + int(crawl.get("refetched", 0))
    snap["crawl_rate"] = rate.add(fetched) if rate is not None else []
    snap["operations"] = operations(cfg)
    snap["at"] = time.time()
    return snap


def _frontier(client: redis.Redis, cfg: Config) -> dict[str, int]:
    """Frontier queues (hosts, or buckets of one) by state, summed over the partitions.

    A queue waiting longer than the crawl's longest politeness delay can make it
    wait is backing off (a failed fetch's back-off, or a server's Retry-After).
    """
    strategy = client.get(cfg.keys.crawl_strategy)
    max_delay = (
        float(json.loads(strategy).get("max_delay", DEFAULT_MAX_DELAY))
        if strategy
        else DEFAULT_MAX_DELAY
    )
    now = int(time.time() * 1000)
    polite_until = now + int(max_delay * 1000)
    parts = partition_keys(client, cfg.keys)
    pipe = client.pipeline(transaction=False)
    for k in parts:
        pipe.zcount(k.crawl_ready, "-inf", now)
        pipe.zcount(k.crawl_ready, f"({now}", polite_until)
        pipe.zcount(k.crawl_ready, f"({polite_until}", "+inf")
        pipe.scard(k.crawl_lagging)
        pipe.hlen(k.crawl_inflight)
        pipe.zcard(k.crawl_due)
        pipe.llen(k.crawl_next_level)
    replies = pipe.execute()
    names = (
        "ready",
        "politeness",
        "backing_off",
        "robots_deferred",
        "in_flight",
        "recrawl_scheduled",
        "next_level",
    )
    out = dict.fromkeys(names, 0)
    for i, n in enumerate(replies):
        out[names[i % len(names)]] += int(n)
    return out


def portal_id() -> str:
    """This portal process, as /metrics names it."""
    return f"portal@{socket.gethostname()}:{os.getpid()}"


def operations(cfg: Config) -> dict[str, Any]:
    """What ``/metrics`` adds to the snapshot: the counters the processes publish, the
    frontier by state, Redis's memory and the guards' state."""
    client = cfg.redis()
    counted = client.hgetall(cfg.keys.metrics)
    used, maxmemory = redis_memory(client)
    guards = {k.decode(): json.loads(v) for k, v in client.hgetall(cfg.keys.guards).items()}
    return {
        "metrics": {k.decode(): float(v) for k, v in counted.items()},
        "frontier": _frontier(client, cfg),
        "redis": {"used_memory": used, "maxmemory": maxmemory},
        "guards": guards,
        "processes": {**live_processes(client, cfg.keys), portal_id(): process_stats()},
    }
