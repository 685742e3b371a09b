"""The crawl master: nrq → scope → seen test → frontier → srq.

The master is the only consumer of the crawl ``nrq`` and the only writer of
the frontier and the seen set. It keeps no state that Redis does not have:
kill it at any moment, start it again, and it continues where the last
committed batch left it. It reads the messages of queues/crawl_protocol.py,
one handler per kind; links come canonical and fingerprinted from the slaves
and are judged, not computed again.

One master runs a job's crawl at a time: it holds the crawl's master lease
(queues/lease.py), and every write it makes is fenced by it, so a master that
was paused past the lease's TTL and woke up after another took over changes
nothing: its next write raises LeaseLost and it leaves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import replace

import redis

from srcrawl.config import Config
from srcrawl.defaults import (
    DEFAULT_CRAWL_BACKLOG_PER_THREAD,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MASTER_BATCH,
    DEFAULT_MASTER_IDLE_WAIT,
    DEFAULT_MASTER_POLL,
    DEFAULT_NO_SLAVE_WARNING,
    DEFAULT_RECRAWL_BATCH,
    DEFAULT_REVISIT_FETCH_VALUE,
    DEFAULT_ROBOTS_TRIES,
    DEFAULT_ROBOTS_TRIES_UNREACHABLE,
    DEFAULT_SEEN_CACHE,
    REDIS_TIMER_TICK,
)
from srcrawl.errors import CrawlRestarted, EnvelopeError, LeaseLost, SrcrawlError
from srcrawl.keys import Keys, lease_waiting_key, processing_pattern
from srcrawl.master.frontier import Batch, Frontier, Improvement, Requeue, now_ms
from srcrawl.master.guards import CrawlGuards
from srcrawl.master.level_barrier import (
    ADVANCED,
    COMPLETE,
    WAITING,
    LevelBarrier,
    forward_links,
)
from srcrawl.master.seen import SeenSet
from srcrawl.outage import REDIS_DOWN, master_waits_out
from srcrawl.queues.crawl_protocol import (
    ERROR_ADDRESS_REFUSED,
    ERROR_CONNECT,
    MASTER_ID,
    UNREACHABLE,
    Deferred,
    Disallowed,
    Fetched,
    FetchTask,
    Links,
    Retry,
    RobotsFetched,
    Seed,
    TaskError,
    queue_of,
    read_outcome,
    sitemap_task,
)
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.crawl_strategy import load as load_strategy
from srcrawl.queues.lease import MasterLease, clear_waiting, holder_id, mark_waiting
from srcrawl.queues.link_cache import ClockCache
from srcrawl.queues.partitions import partition_keys, partition_of_host
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.scope import Scope
from srcrawl.queues.sitemap_lastmod import lastmod_of, record_lastmod
from srcrawl.queues.workers import process_stats, reap, reaped_sentences, workers
from srcrawl.signals import install_stop_handlers
from srcrawl.telemetry import publish_process
from srcrawl.urls import host_of, origin

log = logging.getLogger("srcrawl.master")

HELD_MOVED_PER_ROUND = 10_000
"""Held link messages moved back to nrq per housekeeping round once a guard let go."""

REJECTED = "rejected"
"""Crawl counter of nrq messages that are not well formed."""
REJECTED_LINKS = "rejected_links"
"""Crawl counter of link entries that are not well formed (in well-formed messages)."""


class CrawlMaster:
    """Runs one crawl job until it is complete (or forever with ``keep_running``)."""

    def __init__(
        self,
        cfg: Config,
        *,
        batch: int = DEFAULT_MASTER_BATCH,
        wait_for_work: bool = False,
        partition: int = 0,
        stopping: threading.Event | None = None,
        wait_out: bool = True,
    ) -> None:
        self.cfg = cfg
        self.client = cfg.redis()
        self.job_keys = cfg.keys
        self.strategy: CrawlStrategy = self._wait_for_strategy(wait_for_work)
        self.partitions = self.strategy.partitions
        self.partition = partition
        # the partition's frontier, queues and counters (the job's own keys when P = 1)
        self.keys = cfg.keys.partition(partition, self.partitions)
        self.queues = PhaseQueues(self.client, self.keys, "crawl")
        self.scope = Scope(self.strategy)
        self.seen = SeenSet(self.client, self.keys, error_rate=self.strategy.bloom_error_rate)
        self.recent = ClockCache(DEFAULT_SEEN_CACHE)
        self.lease = MasterLease(
            self.client, self.keys.master_lease("crawl"), holder_id("crawl-master"), cfg.lease_ttl
        )
        nrq = self.queues.nrq
        self.frontier = Frontier(
            self.lease, self.keys, self.queues.srq.key, nrq.key, nrq.processing_key(MASTER_ID)
        )
        self.batch = batch
        self.stopping = stopping if stopping is not None else threading.Event()
        if wait_out:  # every Redis command waits out an outage (until told to stop); a
            # partitioned master's process sets that once for the client its threads share
            master_waits_out(self.client, log, self.stopping)
        self._no_slave_since: float | None = time.monotonic()
        self._said_no_slave = False
        self.host_pages: dict[str, int] = {}
        self.host_limits: dict[str, int] = {}
        """What the frontier holds as the limit of each host spread over several queues."""
        self._last_reap = self._last_renew = 0.0
        self.backlog = 0
        """Most tasks waiting in srq (0: no bound until slaves report their fetch threads)."""
        self._said_rejected = False
        self._level = 0
        self._recorded = True
        self._clear_batch()
        self.improved: dict[int, int] = {}
        """fp → depth of the URLs found nearer than first scheduled (Redis ``improved``): the
        links of a deeper fetch still in flight when it was found take the nearer depth."""
        self.barrier = LevelBarrier(self.client, self.job_keys, self.partitions)
        self.guards = CrawlGuards(cfg, self.client, self.job_keys)
        self._process = f"crawl-master-{partition}@{socket.gethostname()}:{os.getpid()}"
        self._handlers = {
            Seed: self._on_seed,
            Fetched: self._on_fetched,
            RobotsFetched: self._on_robots,
            Retry: self._on_retry,
            Disallowed: self._on_disallowed,
            Deferred: self._on_deferred,
            TaskError: self._on_error,
            Links: self._on_links,
        }

    def _clear_batch(self) -> None:
        """Forget what the last nrq batch gathered: each batch starts from nothing."""
        self._checks: dict[int, FetchTask] = {}
        self._scheduled: dict[int, FetchTask] = {}
        """The tasks of this batch's new URLs, by fingerprint."""
        self._lastmods: list[tuple[int, float]] = []
        self._forward: dict[int, list[tuple[str, int, int]]] = {}
        """Links this batch found for hosts of other partitions: partition -> (url, fp, depth)."""
        self._held: dict[int, list[tuple[str, int]]] = {}
        """Links this batch did not admit (a guard holds admission): depth -> (url, fp)."""
        self._fetched_before: dict[int, tuple[float, float, bool]] = {}
        """fp → (its fetch before this one, this one, whether this one found it changed),
        for pages of this batch going back on the schedule with a visit record."""

    def _wait_for_strategy(self, wait_for_work: bool) -> CrawlStrategy:
        strategy = load_strategy(self.client, self.job_keys)
        holder = holder_id("crawl-master")
        while strategy is None:
            if not wait_for_work:
                raise SrcrawlError(
                    f"job {self.cfg.job!r} has no crawl: start it with `srcrawl crawl SEED…`, "
                    "`srcrawl master start SEED…` or `srcrawl seed URL…`"
                )
            # waiting for seeds is this master's job for now: healthy (srcrawl/health.py)
            mark_waiting(self.client, self.job_keys.master_lease("crawl"), holder)
            time.sleep(1.0)
            strategy = load_strategy(self.client, self.job_keys)
            if strategy is not None:
                clear_waiting(self.client, self.job_keys.master_lease("crawl"))
        return strategy

    def reload_strategy(self) -> None:
        strategy = load_strategy(self.client, self.job_keys)
        if strategy is not None and strategy.partitions != self.partitions:
            raise CrawlRestarted(
                f"the job's crawl now has {strategy.partitions} partitions, not "
                f"{self.partitions}: a new crawl was started; start the master again"
            )
        if strategy is not None and strategy.version != self.strategy.version:
            self.strategy = strategy
            self.scope = Scope(strategy)

    # -- lifecycle -------------------------------------------------------------
    def acquire(self, *, wait: bool = True) -> None:
        """Take the crawl's master lease, then recover what a previous master left.

        A master that died on another host holds the lease until its TTL
        lapses (one that died on this host is taken over at once): wait that long.
        """
        part = f" partition {self.partition}" if self.partitions > 1 else ""
        self.lease.acquire(
            self.lease.ttl_ms / 1000 + 1 if wait else 0,
            what=f"crawl master of job {self.cfg.job!r}{part}",
            stopping=self.stopping.is_set,
        )
        self._last_renew = time.monotonic()
        # a crawl that ended with hosts deferred by robots.txt tries them again now
        if self.client.hexists(self.keys.crawl_state, "deferred"):
            self.frontier.retry_lagging()
        # a previous master's half-processed batch goes back to the head of nrq
        self.frontier.take_over()
        replayed = self.seen.load()
        self.host_pages = {
            k.decode(): int(v) for k, v in self.client.hgetall(self.keys.crawl_host_pages).items()
        }
        self.host_limits = self.frontier.host_limits()
        self.improved = dict(self.frontier.improved_depths())
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
        try:
            return self._loop(keep_running, end_deferred and self.partitions == 1)
        except LeaseLost as e:
            log.error("%s: it stops, having changed nothing since", e)
            raise
        except REDIS_DOWN:
            if not self.stopping.is_set():
                raise
            log.error("stopped while Redis is unreachable")
            return False
        finally:
            with contextlib.suppress(*REDIS_DOWN):
                self.release()

    # -- the loop ----------------------------------------------------------------
    def _loop(self, keep_running: bool, end_deferred: bool = False) -> bool:
        next_ready = now_ms()
        while not self.stopping.is_set():
            self._housekeeping()
            msgs = self._next_messages(next_ready)
            if msgs:
                self.process(msgs)
            handed_out, next_ready = self._hand_out(keep_running)
            if msgs or handed_out:
                next_ready = now_ms()
                continue
            state = self.frontier.level_state(self.queues.nrq.key)
            if state.level_done and not self.queues.nrq.pending(MASTER_ID) and not self._holding():
                if self.partitions > 1:
                    outcome = self._partition_step(keep_running)
                    if outcome == COMPLETE:
                        return True
                    if outcome == ADVANCED:
                        next_ready = now_ms()  # the level released here is due now
                    continue
                if state.next:
                    self._advance_level(lagging=state.lagging > 0)
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
                and not self._holding()
            ):
                # the level's last tasks are all in flight: the next one fills the slots
                # they leave idle (the depth record keeps depths exact, see Frontier)
                self._advance_level(lagging=state.lagging > 0, overlap=True)
                next_ready = now_ms()
        return False

    def _hand_out(self, keep_running: bool) -> tuple[bool, int]:
        """Release due recrawls (an always-on master fetches stored pages again when their
        time comes) and schedule ready queues: (whether any task went out, when the next
        one is due in ms, -1 for none). Nothing goes out while the disk guard pauses."""
        if self.guards.state.disk_paused:  # look again in a while
            return False, now_ms() + int(DEFAULT_MASTER_IDLE_WAIT * 1000)
        due, next_due = (
            self.frontier.release_due(DEFAULT_RECRAWL_BATCH) if keep_running else (0, -1)
        )
        released, next_ready = self.frontier.schedule(backlog=self.backlog)
        return bool(released or due), _earliest(next_ready, next_due)

    def _partition_step(self, keep_running: bool) -> str:
        """This partition is done with the level: see whether every partition is, and move
        the whole crawl on (LevelBarrier). COMPLETE once the crawl is; ADVANCED when this
        partition released its next level; else WAITING."""
        if self.barrier.step(keep_running) == COMPLETE:
            self._finish()
            return COMPLETE
        return ADVANCED if self._catch_up() else WAITING

    def _next_messages(self, due_ms: int) -> list[bytes]:
        """nrq messages, waiting for them until ``due_ms`` (-1: no host is due before one comes).

        An outcome wakes the blocking wait at once, but Redis ends a blocking
        timeout only on its timer tick: the wait ends a tick before the due
        time and the rest is polled, so a host is released on time.
        """
        take = self.frontier.take
        if due_ms < 0:
            return take(self.batch, timeout=DEFAULT_MASTER_IDLE_WAIT)
        wait = min(DEFAULT_MASTER_IDLE_WAIT + REDIS_TIMER_TICK, (due_ms - now_ms()) / 1000)
        if wait > REDIS_TIMER_TICK:
            return take(self.batch, timeout=wait - REDIS_TIMER_TICK)
        msgs = take(self.batch)
        if not msgs and wait > 0:
            time.sleep(min(wait, DEFAULT_MASTER_POLL))
        return msgs

    def _housekeeping(self) -> None:
        now = time.monotonic()
        # renewed a few times per TTL: a lease lost meanwhile ends the master here
        if now - self._last_renew >= self.lease.ttl_ms / 3000:
            self.lease.keep()
            self._last_renew = now
        if now - self._last_reap < DEFAULT_HEARTBEAT_INTERVAL:
            return
        self._last_reap = now
        self.reload_strategy()
        self._guard()
        # no worker heartbeat of its own: its memory and open files reach /metrics so
        publish_process(self.client, self.job_keys, self._process, process_stats())
        returned = reap(self.client, self.keys)
        for sentence in reaped_sentences(returned):
            log.warning("%s", sentence)
        slaves = [
            w
            for w in workers(self.client, self.keys)
            if w.alive and self.queues.srq.key in w.queues
        ]
        threads = sum(int(w.stats.get("crawl_threads", 0)) for w in slaves)
        self.backlog = DEFAULT_CRAWL_BACKLOG_PER_THREAD * threads
        self._watch_slaves(len(slaves), now)
        if self.seen.snapshot_due():
            self.seen.snapshot(self.frontier.transaction)

    def _guard(self) -> None:
        """Look at disk and Redis memory; once admission is free again, the links held
        meanwhile go back to nrq (each move is atomic: none is lost or doubled)."""
        state = self.guards.check(self.strategy.min_free_disk, self.strategy.max_redis_memory)
        if state.admission_held:
            return
        # a bounded share per round: the next rounds move the rest
        held = min(self.client.llen(self.keys.crawl_held), HELD_MOVED_PER_ROUND)
        if held:
            pipe = self.client.pipeline(transaction=False)
            for _ in range(held):
                pipe.lmove(self.keys.crawl_held, self.queues.nrq.key, "LEFT", "RIGHT")
            pipe.execute()
            log.info("%d held link messages back in nrq", held)

    def _holding(self) -> bool:
        """Links wait to be admitted: the depth level may not end before they are judged."""
        return self.guards.state.admission_held or bool(self.client.llen(self.keys.crawl_held))

    def _watch_slaves(self, alive: int, now: float) -> None:
        """Say once when no crawl slave has been alive for a while, and once when one is back."""
        if alive:
            if self._said_no_slave:
                log.warning("%d crawl slave%s alive again", alive, "s are" if alive > 1 else " is")
            self._no_slave_since, self._said_no_slave = None, False
            return
        if self._no_slave_since is None:
            self._no_slave_since = now
        elif not self._said_no_slave and now - self._no_slave_since >= DEFAULT_NO_SLAVE_WARNING:
            self._said_no_slave = True
            log.warning(
                "no crawl slave has been alive for %.0f s: nothing is fetched; start one with "
                "`srcrawl slave start`",
                now - self._no_slave_since,
            )

    def _advance_level(self, *, lagging: bool, overlap: bool = False) -> None:
        """Release the next level. ``overlap``: the current level's tail is still in flight
        (nothing of it queued, nothing of an earlier level out)."""
        # scheduling pauses while a level is released, so no task of the new
        # level runs before all of it is queued (see Frontier)
        state = self.keys.crawl_state
        level = self.client.hget(state, "level") or b"0"

        def next_level(pipe: redis.client.Pipeline) -> None:
            if not lagging:  # nothing is behind: no path scheduled so far can be shortened
                if not overlap:  # nor any to come: the crawl is strict (see Frontier)
                    pipe.hset(state, "strict", int(level) + 1)
                self.frontier.drop_record(pipe)
            if overlap:
                pipe.hincrby(self.keys.stats("crawl"), "levels_overlapped", 1)
            pipe.hincrby(state, "level", 1)

        self.frontier.transaction(next_level)
        while self.frontier.advance() > 0:
            pass

    def _finish(self, deferred: list[str] | None = None) -> None:
        """The crawl is complete: the seen set's snapshot, the depths improved on the way,
        the state and the store's job record. Of a partitioned crawl, this partition's
        (the crawl's own state was completed by the level barrier). ``deferred``: the hosts
        whose robots.txt could not be had, their URLs left in their queues."""
        self.seen.snapshot(self.frontier.transaction)
        improved = self.frontier.improved_depths()
        self.lease.keep()  # the store is not fenced: a master that lost the crawl leaves first
        if improved:  # a page may have been stored from its deeper fetch last
            self.cfg.store().set_depths(improved)
        now = time.time()
        done = (
            {"state": "complete"} if self.partitions > 1 else {"state": "complete", "finished": now}
        )
        if deferred:
            done["deferred"] = " ".join(deferred)
        self.frontier.transaction(lambda pipe: pipe.hset(self.keys.crawl_state, mapping=done))
        started, finished = self.client.hmget(self.job_keys.crawl_state, ["started", "finished"])
        self.cfg.store().set_job(
            self.cfg.job,
            "crawl",
            "complete",
            self.counters(),
            started_at=float(started) if started else None,
            finished_at=float(finished) if finished else now,
        )

    def _partition_level(self) -> int:
        return int(self.client.hget(self.keys.crawl_state, "level") or 0)

    def _catch_up(self, target: int | None = None) -> bool:
        """Release this partition's next-level tasks up to the crawl's level (``target``,
        read when not given), then record that it did (in that order: a master killed
        between releases the rest again). True if it released a level."""
        target = self.barrier.level() if target is None else target
        strict = self.barrier.strict_level()
        level = start = self._partition_level()
        while level < target:
            while self.frontier.advance() > 0:
                pass
            level += 1

            def record_level(pipe: redis.client.Pipeline, lv: int = level) -> None:
                pipe.hset(self.keys.crawl_state, "level", lv)
                if lv == strict:  # reached with nothing lagging anywhere (LevelBarrier)
                    self.frontier.drop_record(pipe)

            self.frontier.transaction(record_level)
        return level > start

    def counters(self) -> dict[str, int]:
        """The crawl's counters (all its partitions')."""
        return crawl_counters(self.client, self.job_keys)

    # -- one batch ------------------------------------------------------------------
    def process(self, msgs: list[bytes]) -> None:
        """Turn a batch of nrq messages into one atomic frontier commit."""
        value = int(DEFAULT_REVISIT_FETCH_VALUE * self.strategy.revisit * 1000)
        batch = Batch(acks=len(msgs), value=max(1, value))
        level, strict, record = self.client.hmget(
            self.job_keys.crawl_state, ["level", "strict", "record"]
        )
        if self.partitions > 1 and int(level or 0) > self._partition_level():
            self._catch_up(int(level or 0))  # the crawl moved on while this partition waited
        if self.partitions > 1:
            record = self.client.hget(self.keys.crawl_state, "record")
        self._level = int(level or 0)
        batch.recording = strict is None or int(strict) != self._level
        # without a depth record no path can be found shorter: links are judged as usual
        self._recorded = batch.recording or record is not None
        self._clear_batch()
        for raw in msgs:
            try:
                outcome = read_outcome(raw)
            except EnvelopeError as e:
                self._reject(raw, e, batch)
                continue
            self._handlers[type(outcome)](outcome, batch)
        self._improve(batch)
        self._judge_lastmods(batch)
        for depth, links in self._held.items():
            batch.held.append(Links(links, depth).encode().decode())
            batch.count("held_links", len(links))
        if self._lastmods:
            # before the commit: a batch replayed after a failure records them again, alike
            dropped = record_lastmod(self.client, self.keys, self._lastmods)
            if dropped:
                batch.count("sitemap_lastmod_dropped", dropped)
        if self._forward:
            # before the commit that acks them: a batch replayed after a failure forwards
            # its links again, and the owners' seen tests drop the repeats
            forward_links(self.client, self.job_keys, self.partitions, self._forward)
            batch.count("links_forwarded", sum(len(v) for v in self._forward.values()))
        journal = self.seen.take_journal()
        try:
            self.frontier.commit(batch, journal)
        except Exception:
            # the filter already holds fingerprints that were not committed:
            # rebuild it (and the host limits) from what Redis has before anything else
            self.seen.load()
            self.host_limits = self.frontier.host_limits()
            raise
        self.improved.update((fp, m.task.depth) for fp, m in batch.improved.items())

    def _reject(self, raw: bytes, error: EnvelopeError, batch: Batch) -> None:
        """Count a malformed message; a queue it names is released, so the crawl goes on."""
        batch.count(REJECTED)
        queue = queue_of(raw)
        if queue is not None:
            batch.done[queue] = None
            batch.lag[queue] = 0
        if not self._said_rejected:
            self._said_rejected = True
            log.warning(
                "rejected a malformed nrq message (%s): %.200r; more are only counted "
                "(crawl counter %r)",
                error,
                raw,
                REJECTED,
            )

    def _polite(self, fetch_ms: float, crawl_delay: float | None) -> int:
        """When a host that just answered may be asked again (epoch ms)."""
        return now_ms() + self.strategy.politeness_ms(fetch_ms, crawl_delay)

    def _learn_limit(self, task: FetchTask, crawl_delay: float | None, batch: Batch) -> None:
        """The task's host answered after its robots.txt was read: a host spread over several
        queues may have them all in flight from now on, or only one with a Crawl-delay."""
        host, sep, _k = task.queue.rpartition("#")
        if not sep:
            return
        limit = 1 if crawl_delay else self.strategy.per_host
        if self.host_limits.get(host) != limit:
            self.host_limits[host] = batch.limits[host] = limit

    def _on_seed(self, seed: Seed, batch: Batch) -> None:
        if seed.strategy > self.strategy.version:
            self.reload_strategy()
        if seed.rejected:
            batch.count(REJECTED_LINKS, seed.rejected)
        for url, fp in seed.urls:
            self._candidate(url, fp, 0, batch)
        for url, fp in seed.again:
            self._reseed(url, fp, batch)

    def _reseed(self, url: str, fp: int, batch: Batch) -> None:
        """A seed given again for a URL whose fetch the address policy refused, now that the
        crawl may reach it: fetched once more although the seen test knows it."""
        reason = self.scope.reject(url, 0)
        if reason is not None:
            batch.count(reason)
            return
        host = host_of(url)
        self.seen.add(fp)
        self.recent.seen_or_add(fp)
        batch.count("reseeded")
        queue = self.strategy.queue_for(host, fp)
        task = FetchTask(url, fp, 0, queue, again=True, strategy=self.strategy.version)
        self._schedule(task, host, batch)

    def _on_links(self, links: Links, batch: Batch) -> None:
        """Links another partition's slave or master found for this partition's hosts."""
        if links.rejected:
            batch.count(REJECTED_LINKS, links.rejected)
        for url, fp in links.links:
            self._candidate(url, fp, links.depth, batch)

    def _on_error(self, error: TaskError, batch: Batch) -> None:
        """A slave's handler failed on these tasks: release their queues."""
        batch.count("slave_errors")
        for raw in error.tasks:
            queue = queue_of(raw)
            if queue is not None:
                batch.done[queue] = None

    def _on_fetched(self, page: Fetched, batch: Batch) -> None:
        queue = page.task.queue
        self._learn_limit(page.task, page.crawl_delay, batch)
        batch.done[queue] = self._polite(page.fetch_ms, page.crawl_delay)
        batch.lag[queue] = 0  # the host answered: its queue counts for the level again
        batch.count(
            "recrawled" if page.task.recrawl else "refetched" if page.task.again else "pages"
        )
        if page.error:  # a cut-off or failed response is no good page, whatever its status
            batch.count("fetch_errors")
            batch.count(f"error_{page.error}")
            if page.error == ERROR_ADDRESS_REFUSED:
                batch.count("address_refused")
        else:
            batch.count(f"status_{page.status // 100}xx" if page.status > 0 else "fetch_errors")
        if page.invalid:
            batch.count("invalid_urls", page.invalid)
        if page.rejected:
            batch.count(REJECTED_LINKS, page.rejected)
        if page.changed is not None:
            batch.count("recrawl_changed" if page.changed else "recrawl_unchanged")
        if page.next is not None:
            before, this = page.task.history, page.next.history
            if before and this and page.changed is not None and self.strategy.sitemaps:
                self._fetched_before[page.task.fp] = (before.at, this.at, page.changed)
            self._due(page.next, batch)
        # a fetch found nearer while it was in flight: its links take the nearer depth
        depth = min(page.task.depth, self.improved.get(page.task.fp, page.task.depth)) + 1
        for url, fp in page.links:
            self._candidate(url, fp, depth, batch)

    def _due(self, task: FetchTask, batch: Batch) -> None:
        """Put a stored page on the recrawl schedule: fetched again ``task.revisit`` seconds
        from now, bypassing the seen test, not the scope (which may have narrowed since)
        nor the host's politeness and robots.txt (its queue and its slave see to those)."""
        if self.scope.reject(task.url, task.depth) is not None:
            batch.count("recrawl_out_of_scope")
            return
        revisit = self.strategy.clamp_revisit(task.revisit)
        queue = self.strategy.queue_for(host_of(task.url), task.fp)
        task = replace(task, revisit=revisit, queue=queue)
        batch.due.append(Requeue(task, now_ms() + int(revisit * 1000)))

    def _judge_lastmods(self, batch: Batch) -> None:
        """Did the sitemap's ``<lastmod>`` tell this fetch's finding (newer than the fetch
        before ⇔ changed)? Then a page found unchanged waits --max-revisit at once (its
        sitemap says when it changes); one found changed keeps the interval its policy
        gave (its lastmod is read only every --sitemap-every, and late). If not, its
        lastmod moves nothing until a fetch finds it right again (a sitemap that lies
        costs no more than none). A lastmod after this fetch tells nothing of it (the
        page is made due now)."""
        if not self._fetched_before:
            return
        lastmods = lastmod_of(self.client, self.keys, list(self._fetched_before))
        lastmods.update(self._lastmods)  # read in this batch: newer
        longest = self.strategy.clamp_revisit(self.strategy.max_revisit)
        for i, due in enumerate(batch.due):
            fp = due.task.fp
            if fp not in self._fetched_before or fp not in lastmods:
                continue
            before, this, changed = self._fetched_before[fp]
            if lastmods[fp] > this:
                continue
            if (lastmods[fp] > before) == changed:
                if not changed:
                    task = replace(due.task, revisit=longest)
                    batch.due[i] = Requeue(task, now_ms() + int(longest * 1000))
                batch.count("sitemap_watched")
            else:
                batch.due[i] = Requeue(replace(due.task, lastmod_wrong=True), due.at)
                batch.count("sitemap_lastmod_wrong")

    def _on_robots(self, robots: RobotsFetched, batch: Batch) -> None:
        """The task fetched robots.txt: the URL itself comes next, at its politeness turn.

        A host whose sitemaps were read gets a task that reads them again every
        --sitemap-every (one per host, on the recrawl schedule): the lastmod they give
        reaches pages whatever else of the host is due. That task's own outcome puts it
        back on the schedule.
        """
        task = robots.task
        batch.count("sitemap_rereads" if task.sitemaps else "robots_fetched")
        self._learn_limit(task, robots.crawl_delay, batch)
        batch.errors[host_of(task.url)] = ""
        polite = self._polite(robots.fetch_ms, robots.crawl_delay)
        batch.lag[task.queue] = 0
        if task.sitemaps:
            batch.done[task.queue] = polite
            self._sitemaps_again(task, batch)
        else:
            batch.retry.append(Requeue(task, polite))
            if self.strategy.sitemaps:
                again = sitemap_task(origin(task.url), task.queue)
                batch.sitemaps[origin(task.url)] = Requeue(again, self._sitemaps_at())
        self._on_sitemap(robots, batch)

    def _sitemaps_at(self) -> int:
        return now_ms() + int(self.strategy.sitemap_every * 1000)

    def _sitemaps_again(self, task: FetchTask, batch: Batch) -> None:
        """Put a host's sitemap task back on the schedule (unless --no-sitemaps now)."""
        if self.strategy.sitemaps:
            batch.due.append(Requeue(replace(task, tries=0, failed=0), self._sitemaps_at()))

    def _on_sitemap(self, robots: RobotsFetched, batch: Batch) -> None:
        """The pages the host's sitemaps named: seeds (depth 0), judged like any link, and
        their ``<lastmod>`` kept for those in scope. A page on the recrawl schedule whose
        ``<lastmod>`` is newer than its last fetch is due now (see Frontier's commit)."""
        for name, n in robots.sitemap_counts.items():
            batch.count(name, n)
        if robots.rejected:
            batch.count(REJECTED_LINKS, robots.rejected)
        if not self.strategy.sitemaps:
            return  # a slave that had not seen --no-sitemaps yet
        for url, fp, lastmod in robots.sitemap:
            scheduled = batch.stats.get("scheduled", 0)
            self._candidate(url, fp, 0, batch)
            if batch.stats.get("scheduled", 0) > scheduled:
                batch.count("sitemap_seeds")
            if lastmod is not None and self.scope.reject(url, 0) is None:
                self._lastmods.append((fp, lastmod))
                batch.sooner[fp] = int(lastmod * 1000)

    def _on_disallowed(self, disallowed: Disallowed, batch: Batch) -> None:
        batch.count("robots_disallowed")
        batch.done[disallowed.task.queue] = None
        batch.lag[disallowed.task.queue] = 0

    def _on_retry(self, retry: Retry, batch: Batch) -> None:
        """Queue a failed fetch again after a back-off, its host still polite meanwhile.

        A failure of the host (no connection; 429, or 503 with Retry-After: the server
        asks every client to wait) holds its queue for the back-off, the host's other
        queues keeping their politeness. A failure of one URL (a 500, a timeout, a cut-off
        body, while the host may well answer others) holds only that URL: its queue goes
        on at its politeness turn.
        """
        task = replace(retry.task, failed=retry.task.failed + 1)
        self._learn_limit(task, retry.crawl_delay, batch)
        batch.count("fetch_retries")
        batch.count(f"retry_{retry.error or 'status_' + str(retry.status)}")
        polite = self.strategy.politeness_ms(retry.fetch_ms, retry.crawl_delay)
        wait = max(self.strategy.retry_ms(task.failed, retry.retry_after), polite)
        now = now_ms()
        if _host_failed(retry):
            batch.retry.append(Requeue(task, now + wait, slot=now + polite, held=True))
        else:
            batch.count("url_backoffs")
            batch.backoff.append(Requeue(task, now + wait, slot=now + polite))
        batch.lag[task.queue] = 0

    def _on_deferred(self, deferred: Deferred, batch: Batch) -> None:
        """A task whose host's robots.txt could not be had: retry it later, or give it up.

        A host that could not even be connected to gets fewer tries than one
        that answered 5xx: it is most likely a mistyped or stopped seed.
        """
        task = replace(deferred.task, tries=deferred.task.tries + 1)
        reason = deferred.reason  # only when robots.txt was just fetched, not from the cache
        limit = DEFAULT_ROBOTS_TRIES_UNREACHABLE if reason in UNREACHABLE else DEFAULT_ROBOTS_TRIES
        retry_at = None
        if task.tries >= limit:
            batch.count("robots_gave_up")
            batch.done[task.queue] = None
            batch.lag[task.queue] = 0
            if task.sitemaps:  # the host may answer again by the next time
                self._sitemaps_again(task, batch)
        else:
            batch.count("robots_deferred")
            wait = self.strategy.politeness_ms(deferred.fetch_ms, None)
            retry_at = max(int(deferred.until * 1000), now_ms() + wait)
            batch.retry.append(Requeue(task, retry_at))
            # a short wait costs the level little: keep the barrier (exact without
            # bookkeeping); only a host deferred for longer stops holding the others
            batch.lag[task.queue] = int(retry_at - now_ms() >= self.strategy.lag_after * 1000)
        if reason:
            record = {
                "what": "robots.txt",
                "reason": reason,
                "try": task.tries,
                "tries": limit,
                "retry_at": retry_at / 1000 if retry_at else None,
            }
            batch.errors[host_of(task.url)] = json.dumps(record)

    def _improve(self, batch: Batch) -> None:
        """URLs found again by a shorter path than the depth they were scheduled at: record
        the new depth and fetch them at it, so that their links get it too (the commit
        replaces a deeper task still queued, see Frontier)."""
        if not self._checks:
            return
        fps = [fp for fp in self._checks if fp not in self._scheduled]
        recorded = dict(zip(fps, self.frontier.recorded_depths(fps), strict=True))
        for fp, task in self._checks.items():
            first = self._scheduled.get(fp)
            was = first.depth if first is not None else recorded.get(fp)
            if was is None or was <= task.depth:
                continue
            batch.count("depth_improved")
            if first is not None:  # scheduled by this very batch: schedule it nearer instead
                batch.count("depth_improved_queued")
                self._reschedule(first, replace(task, again=False), batch)
                continue
            batch.improved[fp] = Improvement(task, was)

    def _reschedule(self, first: FetchTask, task: FetchTask, batch: Batch) -> None:
        """Put ``task`` in the place of ``first``, a task of this batch's new URLs."""
        tasks = batch.now if first.depth <= self._level else batch.next
        tasks.remove(first)
        batch.now.append(task)
        batch.depths[task.fp] = task.depth
        self._scheduled[task.fp] = task

    def _candidate(self, url: str, fp: int, depth: int, batch: Batch) -> None:
        """Judge one link (canonical, fingerprinted by its sender): schedule it or count why not."""
        if self.guards.state.admission_held:  # judged once the guard lets go
            self._held.setdefault(depth, []).append((url, fp))
            return
        # A link found behind the current level (on a page of a lagging queue, or a late
        # host's sitemap seed) may be a shorter path to a URL scheduled deeper: see Frontier.
        behind = self._recorded and depth <= self._level
        # most links are repeats: one already judged seen is a duplicate whatever its depth
        if fp in self.recent and not behind:
            self.recent.seen_or_add(fp)
            batch.count("duplicates")
            return
        reason = self.scope.reject(url, depth)
        if reason is not None:
            batch.count(reason)
            return
        host = host_of(url)
        if self.partitions > 1:
            owner = partition_of_host(host, self.partitions)
            if owner != self.partition:  # not this partition's host: its owner judges it
                self._forward.setdefault(owner, []).append((url, fp, depth))
                return
        cap = self.strategy.max_pages_per_host
        if cap and self.host_pages.get(host, 0) >= cap:
            batch.count("host_cap")
            return
        is_new = self.seen.add(fp)
        self.recent.seen_or_add(fp)
        queue = self.strategy.queue_for(host, fp)
        if not is_new:
            batch.count("duplicates")
            if behind and depth < getattr(self._checks.get(fp), "depth", depth + 1):
                self._checks[fp] = FetchTask(url, fp, depth, queue, again=True)
            return
        self._schedule(FetchTask(url, fp, depth, queue), host, batch)

    def _schedule(self, task: FetchTask, host: str, batch: Batch) -> None:
        if self.strategy.max_pages_per_host:
            self.host_pages[host] = self.host_pages.get(host, 0) + 1
            batch.hosts[host] = batch.hosts.get(host, 0) + 1
        if task.depth > 0:  # a seed is never found nearer
            batch.depths[task.fp] = task.depth
            self._scheduled[task.fp] = task
        batch.count("scheduled")
        if task.depth <= self._level:
            batch.now.append(task)
        else:
            batch.next.append(task)


def crawl_counters(client: redis.Redis, job_keys: Keys) -> dict[str, int]:
    """The crawl's counters, summed over its partitions."""
    total: dict[str, int] = {}
    for k in partition_keys(client, job_keys):
        for name, n in client.hgetall(k.stats("crawl")).items():
            total[name.decode()] = total.get(name.decode(), 0) + int(n)
    return total


def _host_failed(retry: Retry) -> bool:
    """Does the failure say the whole host should be left alone for a while, not one URL?"""
    if retry.error == ERROR_CONNECT:
        return True
    return retry.status == 429 or (retry.status == 503 and retry.retry_after is not None)


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
        ]
        for prefix in (k.crawl_queue_prefix, k.crawl_parked_prefix, k.crawl_cooling_prefix):
            doomed += [key for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        for queue in (q.srq, q.nrq):
            doomed += list(client.scan_iter(match=processing_pattern(queue.key), count=1000))
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
