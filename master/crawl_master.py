"""The crawl master: nrq → scope → seen test → frontier → srq.

The master is the only consumer of the crawl ``nrq`` and the only writer of
the frontier and the seen set. It keeps no state that Redis does not have:
kill it at any moment, start it again, and it continues where the last
committed batch left it. It keeps the loop and the lease; what a batch of
nrq messages decides is the frontier's (master/frontier/: the outcomes read,
the links admitted, the recrawls and levels).

One master runs a job's crawl at a time: it holds the crawl's master lease
(queues/lease.py), and every write to the frontier is fenced by it, so a
master that was paused past the lease's TTL and woke up after another took
over changes nothing there: its next fenced write raises LeaseLost and it
leaves. A few writes are not fenced but replay-safe (a batch replayed by the
next master writes them again, alike): the slaves' reaped tasks, the
sitemaps' lastmods and the links forwarded to other partitions.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from srcrawl.core.defaults import (
    DEFAULT_CRAWL_BACKLOG_PER_THREAD,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MASTER_BATCH,
    DEFAULT_MASTER_IDLE_WAIT,
    DEFAULT_NO_SLAVE_WARNING,
    DEFAULT_PAUSE_CHECK,
    DEFAULT_RECRAWL_BATCH,
    DEFAULT_REVISIT_FETCH_VALUE,
)
from srcrawl.core.keys import Keys, lease_acquirer_key, lease_waiting_key, processing_pattern
from srcrawl.core.signals import install_stop_handlers
from srcrawl.core.telemetry import publish_process
from srcrawl.master.crawl_control import paused_since
from srcrawl.master.frontier import Frontier, now_ms
from srcrawl.master.frontier.admission import Admission, HeldLinks
from srcrawl.master.frontier.barrier import ADVANCED, COMPLETE, WAITING, LevelBarrier
from srcrawl.master.frontier.levels import Levels
from srcrawl.master.frontier.outcomes import Outcomes
from srcrawl.master.frontier.politeness import Politeness
from srcrawl.master.frontier.recrawl import Recrawl
from srcrawl.master.frontier.rules import CrawlRules, wait_for_strategy
from srcrawl.master.frontier.seen import SeenSet
from srcrawl.master.given_up import store_given_up
from srcrawl.master.guards import CrawlGuards
from srcrawl.queues.crawl_protocol import MASTER_ID
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.master_session import MasterSession
from srcrawl.queues.partitions import partition_keys
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.workers import process_stats, reap, reaped_sentences, workers
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

log = logging.getLogger("srcrawl.master")


class CrawlMaster:
    """Runs one crawl job until it is complete (or forever with ``keep_running``).

    Takes what it needs built (:meth:`from_config` builds it from a Config): the Redis
    client, the job's keys, the guards, and the store, opened when the crawl completes.
    """

    def __init__(
        self,
        client: redis.Redis,
        job_keys: Keys,
        *,
        job: str,
        guards: CrawlGuards,
        store: Callable[[], Store],
        lease_ttl: float,
        batch: int = DEFAULT_MASTER_BATCH,
        wait_for_work: bool = False,
        partition: int = 0,
        stopping: threading.Event | None = None,
        wait_out: bool = True,
    ) -> None:
        self.client, self.job_keys, self.job = client, job_keys, job
        self.guards, self.store = guards, store
        self.rules = CrawlRules(wait_for_strategy(client, job_keys, job, wait=wait_for_work))
        self.partitions, self.partition = self.strategy.partitions, partition
        # the partition's frontier, queues and counters (the job's own keys when P = 1)
        self.keys = keys = job_keys.partition(partition, self.partitions)
        self.queues = PhaseQueues(client, keys, "crawl")
        # lease, renewal, outage wait (wait_out=False: a partitioned process waits for all)
        self.session = MasterSession(
            client,
            keys,
            "crawl",
            lease_ttl=lease_ttl,
            log=log,
            stopping=stopping,
            wait_out=wait_out,
        )
        self.lease, self.stopping = self.session.lease, self.session.stopping
        nrq = self.queues.nrq
        self.frontier = Frontier(
            self.lease, keys, self.queues.srq.key, nrq.key, nrq.processing_key(MASTER_ID)
        )
        self.batch = batch
        self.slaves = SlaveWatch()
        self._last_reap = 0.0
        self._pause_checked, self._is_paused = -DEFAULT_PAUSE_CHECK, False
        self.backlog = 0
        """Most tasks waiting in srq (0: no bound until slaves report their fetch threads)."""
        self.seen = SeenSet(client, keys, error_rate=self.strategy.bloom_error_rate)
        self.politeness = Politeness(self.rules)
        self.hold = HeldLinks(guards, client, keys, nrq.key)
        self.admission = Admission(
            self.rules,
            self.seen,
            self.frontier,
            partition=partition,
            partitions=self.partitions,
            holding=self.hold.held,
        )
        self.recrawl = Recrawl(self.rules, client, keys)
        self.outcomes = Outcomes(
            self.rules, self.admission, self.recrawl, self.politeness, self.reload_strategy
        )
        self.levels = Levels(self.frontier, keys, LevelBarrier(client, job_keys, self.partitions))
        self._process = f"crawl-master-{partition}@{socket.gethostname()}:{os.getpid()}"

    @classmethod
    def from_config(cls, cfg: Config, **options: Any) -> CrawlMaster:
        """A master of ``cfg``'s job, its dependencies built from ``cfg``."""
        client = cfg.redis()
        guards = CrawlGuards(cfg, client, cfg.keys)
        return cls(
            client,
            cfg.keys,
            job=cfg.job,
            guards=guards,
            store=cfg.store,
            lease_ttl=cfg.lease_ttl,
            **options,
        )

    @property
    def strategy(self) -> CrawlStrategy:
        return self.rules.strategy

    def reload_strategy(self) -> None:
        self.rules.reload(self.client, self.job_keys, self.partitions)

    # -- lifecycle -------------------------------------------------------------
    def acquire(self, *, wait: bool = True) -> None:
        """Take the crawl's master lease, then recover what a previous master left.

        A master that died on another host holds the lease until its TTL
        lapses (one that died on this host is taken over at once): wait that long.
        """
        part = f" partition {self.partition}" if self.partitions > 1 else ""
        wait_for = self.session.takeover_wait if wait else 0
        self.session.acquire(wait_for, what=f"crawl master of job {self.job!r}{part}")
        # a crawl that ended with hosts deferred by robots.txt tries them again now
        if self.client.hexists(self.keys.crawl_state, "deferred"):
            self.frontier.retry_lagging()
        # a previous master's half-processed batch goes back to the head of nrq
        self.frontier.take_over()
        replayed = self.admission.load()
        self.politeness.host_limits = self.frontier.host_limits()
        log.info("master up%s: seen set %d (+%d replayed)", part, len(self.seen), replayed)

    def release(self) -> None:
        """Let the lease go, if it is still ours."""
        self.lease.release()

    def install_signal_handlers(self) -> None:
        """First signal: finish the batch in hand. Second: leave at once."""
        install_stop_handlers(self.stopping)

    def run(
        self, *, keep_running: bool = False, acquired: bool = False, end_deferred: bool = False
    ) -> bool:
        """Crawl until complete (True) or stopped (False); LeaseLost if another took over.

        ``acquired``: the lease was taken already (:meth:`acquire`, by a partitioned master).
        ``end_deferred``: a one-shot crawl ends once only queues deferred by their host's
        robots.txt (lagging) are left; the crawl state names their hosts (``deferred``),
        and the next master to take the crawl over tries them again at once.
        """
        if not acquired:
            self.acquire()
        with self.session.running():
            return self._loop(keep_running, end_deferred and self.partitions == 1)
        return False  # stopped while Redis was unreachable

    # -- the loop ----------------------------------------------------------------
    def _loop(self, keep_running: bool, end_deferred: bool = False) -> bool:
        next_ready = now_ms()
        while not self.stopping.is_set():
            self._housekeeping()
            msgs = self.frontier.take_until(self.batch, next_ready)
            if msgs:
                self.process(msgs)
            handed_out, next_ready = self._hand_out(keep_running)
            if msgs or handed_out:
                next_ready = now_ms()
                continue
            state = self.frontier.level_state(self.queues.nrq.key, self.strategy.lag_after)
            if (
                state.level_done
                and not self.queues.nrq.pending(MASTER_ID)
                and not self.hold.pending()
            ):
                if self.partitions > 1:
                    outcome = self._partition_step(keep_running)
                    if outcome == COMPLETE:
                        return True
                    if outcome == ADVANCED:
                        next_ready = now_ms()  # the level released here is due now
                    continue
                if state.next:
                    self.levels.advance(lagging=state.lagging > 0)
                    # the new level is due now: no blocking wait on nrq before scheduling it
                    next_ready = now_ms()
                    continue
                if not keep_running and not state.lagging:
                    self._finish()
                    return True
                deferred = self.frontier.deferred_hosts() if end_deferred else None
                if not keep_running and deferred:  # only hosts deferred by robots.txt left
                    self._finish(deferred=deferred)
                    return True
            elif (
                self.partitions == 1
                and not keep_running
                and state.tail_only
                and not self.hold.pending()
            ):
                # the level's last tasks are all in flight: the next one fills the slots
                # they leave idle (the depth record keeps depths exact, see Frontier)
                self.levels.advance(lagging=state.lagging > 0, overlap=True)
                next_ready = now_ms()
        return False

    def _hand_out(self, keep_running: bool) -> tuple[bool, int]:
        """Release due recrawls (an always-on master fetches stored pages again when their
        time comes) and schedule ready queues: (whether any task went out, when the next
        one is due in ms, -1 for none). Nothing goes out while the disk guard pauses, nor
        while an operator paused the job (master/crawl_control.py)."""
        if self.guards.state.disk_paused or self._paused():  # look again in a while
            return False, now_ms() + int(DEFAULT_MASTER_IDLE_WAIT * 1000)
        due, next_due = (
            self.frontier.release_due(DEFAULT_RECRAWL_BATCH) if keep_running else (0, -1)
        )
        released, next_ready = self.frontier.schedule(backlog=self.backlog)
        return bool(released or due), _earliest(next_ready, next_due)

    def _paused(self) -> bool:
        """Whether the job is paused, read from Redis at most every DEFAULT_PAUSE_CHECK s."""
        now = time.monotonic()
        if now >= self._pause_checked + DEFAULT_PAUSE_CHECK:
            self._pause_checked = now
            self._is_paused = paused_since(self.client, self.job_keys) is not None
        return self._is_paused

    def _partition_step(self, keep_running: bool) -> str:
        """This partition is done with the level: see whether every partition is, and move
        the whole crawl on (LevelBarrier). COMPLETE once the crawl is; ADVANCED when this
        partition released its next level; else WAITING."""
        if self.levels.barrier.step(keep_running, self.strategy.lag_after) == COMPLETE:
            self._finish()
            return COMPLETE
        return ADVANCED if self.levels.catch_up() else WAITING

    def _housekeeping(self) -> None:
        now = time.monotonic()
        # renewed a few times per TTL: a lease lost meanwhile ends the master here
        self.session.keep_alive()
        if now - self._last_reap < DEFAULT_HEARTBEAT_INTERVAL:
            return
        self._last_reap = now
        self.reload_strategy()
        self.hold.check(self.strategy)
        # no worker heartbeat of its own: its memory and open files reach /metrics so
        publish_process(self.client, self.job_keys, self._process, process_stats())
        # not fenced, replay-safe: a task returned to srq twice is fetched once more at most
        for sentence in reaped_sentences(reap(self.client, self.keys)):
            log.warning("%s", sentence)
        srq = self.queues.srq.key
        slaves = [w for w in workers(self.client, self.keys) if w.alive and srq in w.queues]
        threads = sum(int(w.stats.get("crawl_threads", 0)) for w in slaves)
        self.backlog = DEFAULT_CRAWL_BACKLOG_PER_THREAD * threads
        self.slaves.see(len(slaves), now)
        if self.seen.snapshot_due():
            self.seen.snapshot(self.frontier.transaction)

    def _finish(self, deferred: list[str] | None = None) -> None:
        """The crawl is complete: the seen set's snapshot, the depths improved on the way,
        the state and the store's job record. Of a partitioned crawl, this partition's
        (the crawl's own state was completed by the level barrier). ``deferred``: the hosts
        whose robots.txt could not be had, their URLs left in their queues."""
        self.seen.snapshot(self.frontier.transaction)
        improved = self.frontier.improved_depths()
        self.lease.keep()  # the store is not fenced: a master that lost the crawl leaves first
        if improved:  # a page may have been stored from its deeper fetch last
            self.store().set_depths(improved)
        now = time.time()
        done = (
            {"state": "complete"} if self.partitions > 1 else {"state": "complete", "finished": now}
        )
        if deferred:
            done["deferred"] = " ".join(deferred)
        self.frontier.transaction(lambda pipe: pipe.hset(self.keys.crawl_state, mapping=done))
        started, finished = self.client.hmget(self.job_keys.crawl_state, ["started", "finished"])
        self.store().set_job(
            self.job,
            "crawl",
            "complete",
            self.counters(),
            started_at=float(started) if started else None,
            finished_at=float(finished) if finished else now,
        )

    def counters(self) -> dict[str, int]:
        """The crawl's counters (all its partitions')."""
        return crawl_counters(self.client, self.job_keys)

    # -- one batch ------------------------------------------------------------------
    def process(self, msgs: list[bytes]) -> None:
        """Turn a batch of nrq messages into one atomic frontier commit."""
        value = int(DEFAULT_REVISIT_FETCH_VALUE * self.strategy.revisit * 1000)
        w = self.levels.start_batch(len(msgs), max(1, value))
        w.batch.lag_after = int(self.strategy.lag_after * 1000)
        self.outcomes.read(msgs, w)
        # before the commit, not fenced and replay-safe (see the module doc)
        self.recrawl.record(w)
        self.admission.forward(self.client, self.job_keys, w)
        if w.gave_up:  # their rows first: a batch replayed writes them again, alike
            store_given_up(self.store(), w.gave_up)
        journal = self.seen.take_journal()
        try:
            self.frontier.commit(w.batch, journal)
        except Exception:
            # the filter already holds fingerprints that were not committed:
            # rebuild it (and the host limits) from what Redis has before anything else
            self.seen.load()
            self.politeness.host_limits = self.frontier.host_limits()
            raise
        self.admission.committed(w)


class SlaveWatch:
    """Says once when no crawl slave has been alive for a while, and once when one is back."""

    def __init__(self) -> None:
        self._since: float | None = time.monotonic()
        self._said = False

    def see(self, alive: int, now: float) -> None:
        if alive:
            if self._said:
                log.warning("%d crawl slave%s alive again", alive, "s are" if alive > 1 else " is")
            self._since, self._said = None, False
            return
        if self._since is None:
            self._since = now
        elif not self._said and now - self._since >= DEFAULT_NO_SLAVE_WARNING:
            self._said = True
            log.warning(
                "no crawl slave has been alive for %.0f s: nothing is fetched; start one with "
                "`srcrawl slave start`",
                now - self._since,
            )


def crawl_counters(client: redis.Redis, job_keys: Keys) -> dict[str, int]:
    """The crawl's counters, summed over its partitions."""
    total: dict[str, int] = {}
    for k in partition_keys(client, job_keys):
        for name, n in client.hgetall(k.stats("crawl")).items():
            total[name.decode()] = total.get(name.decode(), 0) + int(n)
    return total


def _earliest(a: int, b: int) -> int:
    """The earlier of two due times in ms, -1 meaning none."""
    if a < 0 or b < 0:
        return max(a, b)
    return min(a, b)


def reset_crawl(cfg: Config) -> None:
    """Forget a job's crawl state (frontier, seen set, queues of every partition); the
    store is kept."""
    client = cfg.redis()
    job = cfg.keys
    # the counters published for /metrics and the guards' state go with the crawl's counters
    doomed = [
        job.crawl_strategy,
        job.crawl_state,
        job.crawl_masters,
        job.crawl_assignment,
        job.metrics,
        job.guards,
        job.processes,
    ]
    for k in partition_keys(client, job):
        q = PhaseQueues(client, k, "crawl")
        # the sitemaps' <lastmod> goes too: it is read again with each host's robots.txt
        doomed += [
            *k.crawl_keys(),
            k.sitemap_lastmod,
            q.srq.key,
            q.nrq.key,
            k.master_lease("crawl"),
            # a master of the crawl before the reset never takes the lease back
            lease_acquirer_key(k.master_lease("crawl")),
        ]
        for prefix in (k.crawl_queue_prefix, k.crawl_parked_prefix, k.crawl_cooling_prefix):
            doomed += [key for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        for queue in (q.srq, q.nrq):
            doomed += list(client.scan_iter(match=processing_pattern(queue.key), count=1000))
    # the slaves' host slots: a reset crawl starts with every slot free
    doomed += list(client.scan_iter(match=job.crawl_host_slots("*"), count=1000))
    for lease in {
        job.master_lease("crawl"),
        *(k.master_lease("crawl") for k in partition_keys(client, job)),
    }:
        # masters' word that they wait for the crawl: a live one says it again at once
        doomed += list(client.scan_iter(match=lease_waiting_key(lease, "*"), count=1000))
    doomed = list(dict.fromkeys(doomed))
    for i in range(0, len(doomed), 1000):
        client.delete(*doomed[i : i + 1000])


def crawl_state(cfg: Config) -> dict[str, str]:
    raw = cfg.redis().hgetall(cfg.keys.crawl_state)
    return {k.decode(): v.decode() for k, v in raw.items()}
