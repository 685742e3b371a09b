"""A crawl master process of a partitioned crawl: partitions taken and given by lease.

Every partition of a crawl with ``--partitions P`` > 1 has its own master
lease (``Keys.master_lease`` under the partition's tag) and is run by one
:class:`~srcrawl.master.crawl_master.CrawlMaster` at a time, fenced by that
lease as an unpartitioned crawl's master is. Any number of master processes
share the partitions:

- each registers in the job's ``crawl_masters`` hash with an expiry it
  renews, and from the live registrations works out its fair share,
  ceil(P / masters);
- below its share it takes partitions whose lease nobody holds (a lapsed
  lease of a master that died counts as nobody's), each run in a thread
  of its own;
- above it (another master came up) it hands partitions back: their
  threads finish the batch in hand and release the lease, for the newcomer
  to take.

So a second master is a standby when there is one partition, and a
co-worker when there are many. A master killed outright holds its
partitions until their leases lapse (the lease TTL), then the others take
them; its partitions' state is all in Redis, so nothing is lost.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import zlib
from dataclasses import dataclass

import redis

from srcrawl.config import Config
from srcrawl.defaults import MASTER_REGISTRATION_TTL
from srcrawl.errors import LeaseHeld, LeaseLost
from srcrawl.master.crawl_master import CrawlMaster, crawl_counters
from srcrawl.master.level_barrier import LevelBarrier
from srcrawl.outage import REDIS_DOWN, RedisOutage, wait_out_outages
from srcrawl.queues.lease import holder_id

log = logging.getLogger("srcrawl.master")

_TICK = 0.5
"""Seconds between two looks at the registrations and the partitions' leases."""


@dataclass
class _Held:
    master: CrawlMaster
    thread: threading.Thread
    stop: threading.Event


class PartitionedMaster:
    """One master process of a partitioned crawl (see the module doc)."""

    def __init__(self, cfg: Config, partitions: int, *, keep_running: bool = False) -> None:
        self.cfg = cfg
        self.client = cfg.redis()
        self.keys = cfg.keys
        self.partitions = partitions
        self.keep_running = keep_running
        self.id = holder_id("crawl-masters")
        self.stopping = threading.Event()
        self.held: dict[int, _Held] = {}
        self.barrier = LevelBarrier(self.client, self.keys, partitions)
        # partitions are looked at from an offset of this process's own, so that masters
        # starting together do not all reach for the same ones first
        self._offset = zlib.crc32(self.id.encode()) % partitions

    # -- the loop -------------------------------------------------------------
    def run(self) -> bool:
        """Run partitions until the crawl is complete (True) or this process is stopped."""
        wait_out_outages(self.client, RedisOutage(log, stopping=self.stopping))
        try:
            while not self.stopping.is_set():
                self._register()
                self._reap_threads()
                if self._all_complete():
                    return True
                share = self._fair_share()
                self._give_back(len(self.held) - share)
                self._take(share - len(self.held))
                self.stopping.wait(_TICK)
            return False
        except REDIS_DOWN:
            if not self.stopping.is_set():
                raise
            log.error("stopped while Redis is unreachable")
            return False
        finally:
            self._stop_all()

    def _register(self) -> None:
        until = int((time.time() + MASTER_REGISTRATION_TTL) * 1000)
        self.client.hset(self.keys.crawl_masters, self.id, until)

    def _fair_share(self) -> int:
        """ceil(P / live masters), dropping registrations that lapsed."""
        now = time.time() * 1000
        live = 0
        for mid, until in self.client.hgetall(self.keys.crawl_masters).items():
            if int(until) < now:
                self.client.hdel(self.keys.crawl_masters, mid)
            else:
                live += 1
        return math.ceil(self.partitions / max(1, live))

    def _all_complete(self) -> bool:
        """Is the crawl complete and has every partition made its last writes?"""
        if self.keep_running or not self.barrier.complete() or self.held:
            return False
        states = [self.client.hget(k.crawl_state, "state") for k in self.barrier.partitions]
        return all(s == b"complete" for s in states)

    # -- partitions taken and given -------------------------------------------------
    def _take(self, n: int) -> None:
        """Take up to ``n`` partitions whose lease nobody holds (or, once the crawl is
        complete, any whose last writes are still to be made)."""
        for i in range(self.partitions):
            if n <= 0:
                return
            p = (self._offset + i) % self.partitions
            k = self.barrier.partitions[p]
            if p in self.held or self.client.exists(k.master_lease("crawl")):
                continue
            if self.barrier.complete() and self.client.hget(k.crawl_state, "state") == b"complete":
                continue
            if self._start(p):
                n -= 1

    def _start(self, p: int) -> bool:
        stop = threading.Event()
        master = CrawlMaster(self.cfg, partition=p, stopping=stop)
        wait_out_outages(self.client, RedisOutage(log, stopping=self.stopping))
        try:
            master.acquire(wait=False)
        except LeaseHeld:
            return False
        thread = threading.Thread(
            target=self._run_partition, args=(master,), name=f"partition-{p}", daemon=True
        )
        held = self.held[p] = _Held(master, thread, stop)
        held.thread.start()
        log.info("took partition %d of %d", p, self.partitions)
        return True

    def _run_partition(self, master: CrawlMaster) -> None:
        try:
            master.run(keep_running=self.keep_running, acquired=True)
        except LeaseLost:
            pass  # said by the master; another process holds the partition now
        except Exception:
            log.exception("partition %d failed", master.partition)

    def _give_back(self, n: int) -> None:
        """Hand ``n`` partitions back (the highest numbered): each finishes its batch."""
        for p in sorted(self.held, reverse=True)[: max(0, n)]:
            log.info("hands partition %d back (its fair share is smaller now)", p)
            self.held[p].stop.set()

    def _reap_threads(self) -> None:
        for p in [p for p, h in self.held.items() if not h.thread.is_alive()]:
            del self.held[p]

    def _stop_all(self) -> None:
        for h in self.held.values():
            h.stop.set()
        for h in self.held.values():
            h.thread.join(timeout=30)

    # -- what it did ----------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        return crawl_counters(self.client, self.keys)

    def install_signal_handlers(self) -> None:
        """First signal: every partition finishes its batch. Second: leave at once."""
        from srcrawl.signals import install_stop_handlers

        install_stop_handlers(self.stopping)
        threading.Thread(target=self._relay_stop, daemon=True).start()

    def _relay_stop(self) -> None:
        self.stopping.wait()
        for h in list(self.held.values()):
            h.stop.set()


def holders(client: redis.Redis, cfg: Config, partitions: int) -> dict[int, str | None]:
    """Partition -> the master holding its lease (None: nobody), for status."""
    out: dict[int, str | None] = {}
    for p, k in enumerate(cfg.keys.partitions(partitions)):
        raw = client.get(k.master_lease("crawl"))
        out[p] = raw.decode() if raw is not None else None
    return out
