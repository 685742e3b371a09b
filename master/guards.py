"""Guards that pause the crawl before a volume or Redis runs full.

The crawl master looks every few seconds at the free space of the volumes the
crawl writes to (the WARC directory, and a SQLite store's directory or the disk
a MariaDB server keeps the store on, as its ``information_schema.DISKS`` says)
and at Redis's ``used_memory``:

- **disk**: less free than ``--min-free-disk`` on one of them. The master hands
  out no fetch task and admits no new URL until every volume has that much
  free again. Fetches already handed out finish and are stored.
- **redis_memory**: ``used_memory`` above ``--max-redis-memory`` (by default 90 %
  of Redis's ``maxmemory`` when it has one). The master admits no new URL;
  queued URLs are fetched on.

A URL not admitted is not dropped: the links of the outcomes processed
meanwhile are kept, unjudged, in the partition's held list
(``Keys.crawl_held``) and go back to nrq when the guard lets go; the depth
levels wait for them. The state is written to ``Keys.guards`` (shown by
``srcrawl status`` and ``/metrics``) and every change is logged.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from srcrawl.core.errors import StoreError
from srcrawl.core.keys import Keys
from srcrawl.core.telemetry import redis_memory
from srcrawl.settings.config import Config

log = logging.getLogger("srcrawl.master.guards")

ENV_MIN_FREE_DISK = "SRCRAWL_MIN_FREE_DISK"
ENV_MAX_REDIS_MEMORY = "SRCRAWL_MAX_REDIS_MEMORY"
REDIS_SHARE_OF_MAXMEMORY = 0.9
"""The default memory limit: this share of Redis's ``maxmemory`` (when it has one)."""


def free_bytes(path: Path) -> int:
    """Free bytes (for an unprivileged writer) of the volume holding ``path`` (its
    nearest existing parent when it is not there yet)."""
    p = path.resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def volumes(cfg: Config) -> dict[str, Path]:
    """The volumes the crawl writes to that this process can see: the WARC directory and a
    SQLite store's directory (a database server's disk is asked of the server:
    :meth:`CrawlGuards.store_free`)."""
    out = {"warc": cfg.warc_volume}  # an object store's spool files, or the WARC files
    if cfg.db.kind == "sqlite" and cfg.db.path != ":memory:":
        out["store"] = Path(cfg.db.path).parent
    return out


def memory_limit(max_redis_memory: int, maxmemory: int) -> int:
    """The ``used_memory`` above which no URL is admitted (0: no limit)."""
    if max_redis_memory > 0:
        return max_redis_memory
    return int(maxmemory * REDIS_SHARE_OF_MAXMEMORY) if maxmemory > 0 else 0


def _size(n: float) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.1f} MB"


@dataclass
class GuardState:
    """What the last look found."""

    disk_paused: bool = False
    memory_paused: bool = False
    free: dict[str, int] = field(default_factory=dict)
    used_memory: int = 0
    memory_limit: int = 0

    @property
    def admission_held(self) -> bool:
        return self.disk_paused or self.memory_paused


class CrawlGuards:
    """The crawl master's look at disk and memory, its log lines and its Redis record."""

    def __init__(self, cfg: Config, client: redis.Redis, keys: Keys) -> None:
        self.cfg = cfg
        self.client = client
        self.keys = keys
        self.state = GuardState()
        self._said_store_unwatched = False

    def store_free(self) -> dict[str, int]:
        """``{"store": free bytes}`` of the disk a database server keeps the store on, when
        the server tells (MariaDB with the ``disks`` plugin); {} for a SQLite store (a
        volume of this machine) or a server that does not tell (said once, in the log)."""
        if self.cfg.db.kind == "sqlite":
            return {}
        try:
            free = self.cfg.store().disk_free_bytes()
        except StoreError as e:  # down or busy: the next look asks again
            log.debug("the store's free disk space not read: %s", e)
            return {}
        if free is None:
            if not self._said_store_unwatched:
                self._said_store_unwatched = True
                log.warning(
                    "the store's disk is not watched: its server does not show "
                    "information_schema.DISKS (MariaDB: INSTALL SONAME 'disks', and the "
                    "FILE privilege for srcrawl's user); --min-free-disk watches the WARC "
                    "volume only"
                )
            return {}
        return {"store": free}

    def check(self, min_free_disk: int, max_redis_memory: int) -> GuardState:
        """Look now; log and record a change of state. Returns the new state."""
        was = self.state
        free = {name: free_bytes(p) for name, p in volumes(self.cfg).items()}
        free.update(self.store_free())
        used, maxmemory = redis_memory(self.client)
        limit = memory_limit(max_redis_memory, maxmemory)
        low = {name: n for name, n in free.items() if n < min_free_disk}
        now = GuardState(
            disk_paused=bool(low),
            memory_paused=bool(limit) and used > limit,
            free=free,
            used_memory=used,
            memory_limit=limit,
        )
        if now.disk_paused != was.disk_paused:
            if low:
                where = ", ".join(f"{name} volume {_size(n)} free" for name, n in low.items())
                log.warning(
                    "crawl paused: %s, below --min-free-disk %s; no fetch is handed "
                    "out and no URL admitted until space is back",
                    where,
                    _size(min_free_disk),
                )
            else:
                log.warning("crawl resumed: every volume has %s free again", _size(min_free_disk))
        if now.memory_paused != was.memory_paused:
            if now.memory_paused:
                log.warning(
                    "URL admission paused: Redis uses %s, above --max-redis-memory "
                    "%s; queued URLs are fetched on",
                    _size(used),
                    _size(limit),
                )
            else:
                log.warning(
                    "URL admission resumed: Redis uses %s (limit %s)", _size(used), _size(limit)
                )
        self.state = now
        self._record(now, min_free_disk)
        return now

    def _record(self, state: GuardState, min_free_disk: int) -> None:
        at = time.time()
        disk = {
            "paused": state.disk_paused,
            "free": state.free,
            "min_free": min_free_disk,
            "at": at,
        }
        memory = {
            "paused": state.memory_paused,
            "used": state.used_memory,
            "limit": state.memory_limit,
            "at": at,
        }
        self.client.hset(
            self.keys.guards, mapping={"disk": json.dumps(disk), "redis_memory": json.dumps(memory)}
        )


def guard_sentences(guards: dict[str, dict]) -> list[str]:
    """``srcrawl status``'s lines about a guard that holds the crawl."""
    out = []
    disk = guards.get("disk", {})
    if disk.get("paused"):
        free = ", ".join(f"{name} {_size(n)} free" for name, n in disk.get("free", {}).items())
        out.append(
            f"PAUSED: low disk ({free}; --min-free-disk {_size(disk.get('min_free', 0))})"
            ": no fetch handed out, no URL admitted"
        )
    memory = guards.get("redis_memory", {})
    if memory.get("paused"):
        out.append(
            f"PAUSED: Redis uses {_size(memory.get('used', 0))}, above "
            f"{_size(memory.get('limit', 0))}: no URL admitted (queued ones are fetched)"
        )
    return out
