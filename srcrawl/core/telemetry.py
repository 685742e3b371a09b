"""Counters a process publishes for ``/metrics``, through Redis.

Every process counts in memory and, at each heartbeat, adds what it counted
since the last one to the job's metrics hash (``Keys.metrics``) in one round
trip. The portal's ``/metrics`` reads that hash: the totals live in Redis, so
they survive the restart of the process that counted them (a crash loses at
most one heartbeat's worth), and Prometheus needs one target whatever the
number of slaves (see docs/ARCHITECTURE.md, "Metrics").

Field names of the hash: ``fetches:<class>``, ``fetch_bytes:<class>``,
``fetch_errors:<kind>``, ``fetch_seconds_bucket:<le>``, ``fetch_seconds_count``,
``fetch_seconds_sum``, ``warc_bytes``, ``warc_files``, ``pagerank_runs``, …
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from bisect import bisect_left

import redis

from srcrawl.core.defaults import DEFAULT_HEARTBEAT_TTL, FETCH_SECONDS_BUCKETS
from srcrawl.core.keys import Keys

log = logging.getLogger("srcrawl.core.telemetry")
_said_no_info = threading.Event()

STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx", "1xx", "none")
FETCH_ERROR_KINDS = (
    "timeout",
    "connect",
    "address_refused",
    "bad_response",
    "truncated",
    "decoding",
    "tls",
    "bad_redirect",
    "out_of_scope",
    "scheme",
    "bad_url",
)
"""The kinds a fetch fails by (slave/fetch.py's ``ERROR_*``): ``/metrics`` shows each, 0
until one happens, so a query of any of them has a series from the start."""
ROBOTS_LOOKUPS = ("hit", "miss")


def status_class(status: int) -> str:
    """``2xx`` … ``5xx``; ``none`` when no response came."""
    return f"{status // 100}xx" if 100 <= status < 600 else "none"


class Telemetry:
    """Counters of one process (thread-safe), flushed as increments to Redis."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ints: dict[str, int] = {}
        self._floats: dict[str, float] = {}

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._ints[name] = self._ints.get(name, 0) + n

    def add_float(self, name: str, x: float) -> None:
        with self._lock:
            self._floats[name] = self._floats.get(name, 0.0) + x

    def fetched(self, status: int, body_bytes: int, seconds: float, error: str | None) -> None:
        """One HTTP fetch (a retried one counts each time): its status class, bytes,
        time, and the kind of its failure if it failed."""
        cls = status_class(status)
        # the first bucket whose bound is not below the time; "+Inf" past the last
        i = bisect_left(FETCH_SECONDS_BUCKETS, seconds)
        le = f"{FETCH_SECONDS_BUCKETS[i]:g}" if i < len(FETCH_SECONDS_BUCKETS) else "+Inf"
        counts = [
            (f"fetches:{cls}", 1),
            (f"fetch_bytes:{cls}", body_bytes),
            (f"fetch_seconds_bucket:{le}", 1),
            ("fetch_seconds_count", 1),
        ]
        if error:
            counts.append((f"fetch_errors:{error}", 1))
        with self._lock:
            for name, n in counts:
                self._ints[name] = self._ints.get(name, 0) + n
            self._floats["fetch_seconds_sum"] = self._floats.get("fetch_seconds_sum", 0.0) + seconds

    def take(self) -> tuple[dict[str, int], dict[str, float]]:
        """What was counted since the last take (and forget it)."""
        with self._lock:
            ints, floats = self._ints, self._floats
            self._ints, self._floats = {}, {}
        return ints, floats

    def give_back(self, ints: dict[str, int], floats: dict[str, float]) -> None:
        """Counts a failed flush took: they go out with the next one."""
        with self._lock:
            for k, n in ints.items():
                self._ints[k] = self._ints.get(k, 0) + n
            for k, x in floats.items():
                self._floats[k] = self._floats.get(k, 0.0) + x

    def flush(self, client: redis.Redis, keys: Keys) -> None:
        """Add what was counted to the job's metrics hash (kept for the next flush if
        Redis cannot be reached)."""
        ints, floats = self.take()
        if not ints and not floats:
            return
        pipe = client.pipeline(transaction=False)
        for k, n in ints.items():
            if n:
                pipe.hincrby(keys.metrics, k, n)
        for k, x in floats.items():
            pipe.hincrbyfloat(keys.metrics, k, x)
        try:
            pipe.execute()
        except redis.RedisError:
            self.give_back(ints, floats)
            raise


def record_rank_run(client: redis.Redis, keys: Keys, seconds: float, ok: bool) -> None:
    """One run of ``pagerank --every``: counted, with how long it took."""
    pipe = client.pipeline(transaction=False)
    pipe.hincrby(keys.metrics, "pagerank_runs" if ok else "pagerank_failed", 1)
    if ok:
        pipe.hset(keys.metrics, "pagerank_last_seconds", round(seconds, 3))
    pipe.execute()


class Cumulative:
    """Turns totals a component keeps itself (a WARC writer's bytes and files) into
    increments: a total that went down is a new component's, counted from zero."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def delta(self, name: str, total: int) -> int:
        last = self._last.get(name, 0)
        self._last[name] = total
        return total - last if total >= last else total


def redis_memory(client: redis.Redis) -> tuple[int, int]:
    """(``used_memory``, ``maxmemory``) of Redis; of a Redis Cluster, those of its fullest
    node (whose INFO comes back per node), since that node fills first."""
    primaries = getattr(client, "PRIMARIES", None)  # a RedisCluster client: ask every primary
    try:
        info = client.info("memory", target_nodes=primaries) if primaries else client.info("memory")
    except redis.exceptions.NoPermissionError:
        # an ACL user not granted INFO: memory is unknown (0), so no memory guard acts
        if not _said_no_info.is_set():
            _said_no_info.set()
            log.warning(
                "this Redis user may not run INFO: Redis memory is not watched "
                "(grant it +info for --max-redis-memory and the memory metrics)"
            )
        return 0, 0
    if "used_memory" not in info and info and all(isinstance(v, dict) for v in info.values()):
        nodes = list(info.values())
        fullest = max(nodes, key=lambda n: int(n.get("used_memory", 0)))
        return int(fullest.get("used_memory", 0)), int(fullest.get("maxmemory", 0))
    return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))


def publish_process(client: redis.Redis, keys: Keys, process: str, stats: dict) -> None:
    """Record this process's ``stats`` (memory, open files, CPU) under ``process`` in the
    job's processes hash, and drop the entries of processes gone for a heartbeat TTL."""
    now = time.time()
    entries = client.hgetall(keys.processes)
    stale = [
        k for k, v in entries.items() if now - json.loads(v).get("at", 0) > DEFAULT_HEARTBEAT_TTL
    ]
    pipe = client.pipeline(transaction=False)
    pipe.hset(keys.processes, process, json.dumps({**stats, "at": now}))
    if stale:
        pipe.hdel(keys.processes, *stale)
    pipe.execute()


def live_processes(client: redis.Redis, keys: Keys) -> dict[str, dict]:
    """The entries of the processes hash refreshed within a heartbeat TTL."""
    now = time.time()
    out = {}
    for k, v in client.hgetall(keys.processes).items():
        stats = json.loads(v)
        if now - stats.get("at", 0) <= DEFAULT_HEARTBEAT_TTL:
            out[k.decode()] = stats
    return out


def open_files() -> int:
    """File descriptors this process holds (Linux; 0 where /proc is not there)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0
