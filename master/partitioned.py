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

import contextlib
import json
import logging
import math
import threading
import time
import zlib
from dataclasses import dataclass

import redis

from srcrawl.core.defaults import (
    BALANCE_COOLDOWN,
    BALANCE_MIN_LOAD,
    BALANCE_RATIO,
    BALANCE_SUSTAIN,
    MASTER_REGISTRATION_TTL,
)
from srcrawl.core.errors import LeaseHeld, LeaseLost
from srcrawl.core.keys import Keys
from srcrawl.core.outage import REDIS_DOWN, RedisOutage, wait_out_outages
from srcrawl.master.crawl_master import CrawlMaster, crawl_counters
from srcrawl.master.frontier.barrier import LevelBarrier
from srcrawl.queues.lease import clear_waiting, holder_id, mark_waiting
from srcrawl.settings.config import Config

log = logging.getLogger("srcrawl.master")

_TICK = 0.5
"""Seconds between two looks at the registrations and the partitions' leases."""
ABANDONED_AFTER = 2.0
"""Seconds a partition may go without a master before any master takes it, least loaded
or not (the least loaded one may be the master that just handed it over)."""
_ADDED = ("scheduled", "depth_refetch", "recrawl_due")
_FINISHED = (
    "pages",
    "refetched",
    "recrawled",
    "robots_disallowed",
    "robots_gave_up",
    "sitemap_robots_gave_up",
    "slave_errors",
)


@dataclass
class _Held:
    """A partition this process runs: its thread, and the event that ends it."""

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
        self.loads = [0] * partitions
        """Queued URLs of each partition, as of this master's last registration."""
        self._given: dict[int, float] = {}
        """Partitions handed back → until when this master leaves them to the others."""
        self._quiet_until = 0.0
        self._imbalanced_since: float | None = None
        self._free_since: dict[int, float] = {}
        """Partitions seen without a master → since when (see _take_abandoned)."""
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
                # a co-worker holding no partition (yet) is doing its job (srcrawl/app/health.py)
                mark_waiting(self.client, self.keys.master_lease("crawl"), self.id)
                self._reap_threads()
                if self._all_complete():
                    return True
                self._balance(self._peers())
                self.stopping.wait(_TICK)
            return False
        except REDIS_DOWN:
            if not self.stopping.is_set():
                raise
            log.error("stopped while Redis is unreachable")
            return False
        finally:
            self._stop_all()
            with contextlib.suppress(*REDIS_DOWN):
                clear_waiting(self.client, self.keys.master_lease("crawl"))

    def _register(self) -> None:
        """Renew this process's registration, with its load for the others to see."""
        self.loads = partition_loads(self.client, self.barrier.partitions)
        load = sum(self.loads[p] for p in self.held)
        record = {
            "until": int((time.time() + MASTER_REGISTRATION_TTL) * 1000),
            "load": load,
            "held": len(self.held),
        }
        self.client.hset(self.keys.crawl_masters, self.id, json.dumps(record))

    def _peers(self) -> list[Peer]:
        """The live masters (this one included), dropping registrations that lapsed."""
        now = time.time() * 1000
        out = []
        for mid, raw in self.client.hgetall(self.keys.crawl_masters).items():
            try:
                record = json.loads(raw)
                until, load, held = int(record["until"]), int(record["load"]), int(record["held"])
            except (ValueError, KeyError, TypeError):
                until, load, held = 0, 0, 0
            if until < now:
                self.client.hdel(self.keys.crawl_masters, mid)
            else:
                out.append(Peer(mid.decode(), load, held))
        return out

    def _all_complete(self) -> bool:
        """Is the crawl complete and has every partition made its last writes?"""
        if self.keep_running or not self.barrier.complete() or self.held:
            return False
        states = [self.client.hget(k.crawl_state, "state") for k in self.barrier.partitions]
        return all(s == b"complete" for s in states)

    # -- partitions taken and given -------------------------------------------------
    def _balance(self, peers: list[Peer]) -> None:
        """Take free partitions when this master is the least loaded one; hand some back
        when it carries much more than the least loaded other (see share_to_give)."""
        fair = math.ceil(self.partitions / max(1, len(peers)))
        me = Peer(self.id, sum(self.loads[p] for p in self.held), len(self.held))
        least = min([*peers, me], key=lambda m: (m.held > 0, m.load, m.held, m.id))
        if least.id == self.id:
            self._take(max(1, fair - len(self.held)))
        else:  # a partition left free for long (its giver waits, the least loaded is slow)
            self._take_abandoned()
        others = [m for m in peers if m.id != self.id]
        if not others or time.monotonic() < self._quiet_until or len(self.held) < 2:
            return
        low = min(others, key=lambda m: (m.load, m.held))
        mine = {p: self.loads[p] for p in self.held}
        if me.load + low.load >= BALANCE_MIN_LOAD:
            give = share_to_give(mine, low.load, BALANCE_RATIO)
            if low.held:  # a master with nothing gets its share at once
                give = self._sustained(give)
        elif low.held < len(self.held) - 1:  # an idle crawl: share the partitions by count
            give = sorted(self.held, reverse=True)[: max(0, len(self.held) - fair)]
        else:
            give = []
        if give:
            self._quiet_until = time.monotonic() + BALANCE_COOLDOWN
            self._give_back(give)

    def _sustained(self, give: list[int]) -> list[int]:
        """``give``, once loads have called for a move for BALANCE_SUSTAIN seconds on end: a
        crawl's queues swing as levels start and end, and a move costs the taker a reload
        of the partition's seen set."""
        now = time.monotonic()
        if not give:
            self._imbalanced_since = None
            return []
        if self._imbalanced_since is None:
            self._imbalanced_since = now
        if now - self._imbalanced_since < BALANCE_SUSTAIN:
            return []
        self._imbalanced_since = None
        return give

    def _free(self, p: int) -> bool:
        """May this master take partition ``p``: nobody holds its lease, this master did
        not just hand it over, and it still has work (or, once the crawl is complete, its
        last writes still to be made)?"""
        if p in self.held or self._given.get(p, 0) > time.monotonic():
            return False
        k = self.barrier.partitions[p]
        if self.client.exists(k.master_lease("crawl")):
            self._free_since.pop(p, None)
            return False
        return not (
            self.barrier.complete() and self.client.hget(k.crawl_state, "state") == b"complete"
        )

    def _take_abandoned(self) -> None:
        """Take one partition that has had no master for ABANDONED_AFTER seconds."""
        now = time.monotonic()
        for p in range(self.partitions):
            if not self._free(p):
                continue
            since = self._free_since.setdefault(p, now)
            if now - since >= ABANDONED_AFTER and self._start(p):
                self._free_since.pop(p, None)
                return

    def _take(self, n: int) -> None:
        """Take up to ``n`` free partitions (see _free), from this master's own offset."""
        for i in range(self.partitions):
            if n <= 0:
                return
            p = (self._offset + i) % self.partitions
            if self._free(p) and self._start(p):
                n -= 1

    def _start(self, p: int) -> bool:
        stop = threading.Event()
        master = CrawlMaster.from_config(self.cfg, partition=p, stopping=stop, wait_out=False)
        try:
            master.acquire(wait=False)
        except LeaseHeld:
            return False
        thread = threading.Thread(
            target=self._run_partition, args=(master,), name=f"partition-{p}", daemon=True
        )
        self.held[p] = _Held(thread, stop)
        thread.start()
        record_assignment(self.client, self.keys, p, self.id)
        log.info("took partition %d of %d", p, self.partitions)
        return True

    def _run_partition(self, master: CrawlMaster) -> None:
        try:
            master.run(keep_running=self.keep_running, acquired=True)
        except LeaseLost:
            pass  # said by the master; another process holds the partition now
        except Exception:
            log.exception("partition %d failed", master.partition)

    def _give_back(self, partitions: list[int]) -> None:
        """Hand partitions back: each finishes its batch in hand and lets its lease go,
        for the least loaded master to take (as a master that died would be taken over:
        its state is all in Redis, so nothing is lost or done twice)."""
        for p in partitions:
            log.info("hands partition %d back (queued URLs: %d)", p, self.loads[p])
            self.held[p].stop.set()
            self._given[p] = time.monotonic() + BALANCE_COOLDOWN

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
        from srcrawl.core.signals import install_stop_handlers

        install_stop_handlers(self.stopping)
        threading.Thread(target=self._relay_stop, daemon=True).start()

    def _relay_stop(self) -> None:
        self.stopping.wait()
        for h in list(self.held.values()):
            h.stop.set()


@dataclass(frozen=True)
class Peer:
    """A live master process as its registration says: queued URLs of its partitions."""

    id: str
    load: int
    held: int


def partition_loads(client: redis.Redis, parts: list[Keys]) -> list[int]:
    """Queued URLs of each partition's frontier: tasks scheduled and not yet finished,
    from its counters (a round trip each). The thesis balances crawl queues; what waits
    unread in an nrq is a master's backlog, not a queue, and counting its messages (one
    for fifty links, or one for a page) would make the master that is behind look idle."""
    pipe = client.pipeline(transaction=False)
    for k in parts:
        pipe.hmget(k.stats("crawl"), [*_ADDED, *_FINISHED])
    out = []
    for counts in pipe.execute():
        n = [int(c or 0) for c in counts]
        out.append(max(0, sum(n[: len(_ADDED)]) - sum(n[len(_ADDED) :])))
    return out


def share_to_give(mine: dict[int, int], low: int, ratio: float) -> list[int]:
    """The partitions a master with these loads (partition -> queued URLs) hands over to
    one carrying ``low``, by the split share of [USTC thesis ch.3 §6.1]: when its load L
    is more than ``ratio`` times the other's, K = L / low and it gives the share
    p = 1/2 - 1/(2K) of L, which leaves both with (L + low) / 2. Moves are whole
    partitions: the largest that fit within p·L, at least one, never all."""
    total = sum(mine.values())
    if len(mine) < 2 or total <= ratio * max(low, 1):
        return []
    target = total / 2 if low <= 0 else (0.5 - 0.5 * low / total) * total  # K = total / low
    give: list[int] = []
    moved = 0
    for p, load in sorted(mine.items(), key=lambda item: (-item[1], item[0])):
        if len(give) == len(mine) - 1:
            break
        if moved + load <= target:
            give.append(p)
            moved += load
    if not give:  # every partition is larger than the share: move the smallest
        give = [min(mine, key=lambda p: (mine[p], p))]
    return give


def record_assignment(client: redis.Redis, keys: Keys, partition: int, master: str) -> None:
    """Record that ``master`` (a process id) took ``partition``, as the next version of the
    assignment (status shows it beside each partition's lease)."""
    pipe = client.pipeline(transaction=True)
    pipe.hset(keys.crawl_assignment, str(partition), master)
    pipe.hincrby(keys.crawl_assignment, "version", 1)
    pipe.execute()
