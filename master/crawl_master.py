"""The crawl master [seed 002 §3.1]: nrq → canonicalize → scope → seen test → frontier → srq.

The master is the only consumer of the crawl ``nrq`` and the only writer of
the frontier and the seen set. It keeps no state that Redis does not have:
kill it at any moment, start it again, and it continues where the last
committed batch left it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time

import redis

from srcrawl.config import Config
from srcrawl.defaults import (
    DEFAULT_CRAWL_BACKLOG_PER_THREAD,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_LAG_AFTER,
    DEFAULT_MASTER_BATCH,
    DEFAULT_MASTER_IDLE_WAIT,
    DEFAULT_MASTER_POLL,
    DEFAULT_NO_SLAVE_WARNING,
    DEFAULT_ROBOTS_TRIES,
    DEFAULT_ROBOTS_TRIES_UNREACHABLE,
    DEFAULT_SEEN_CACHE,
    REDIS_TIMER_TICK,
)
from srcrawl.errors import EnvelopeError, SrcrawlError
from srcrawl.keys import processing_pattern
from srcrawl.master.frontier import Batch, Frontier, now_ms
from srcrawl.master.seen import SeenSet
from srcrawl.outage import REDIS_DOWN, RedisOutage, wait_out_outages
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.crawl_strategy import load as load_strategy
from srcrawl.queues.envelope import Message, decode, encode
from srcrawl.queues.link_cache import ClockCache
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.scope import Scope
from srcrawl.queues.workers import reap, reaped_sentences, workers
from srcrawl.signals import install_stop_handlers
from srcrawl.slave.crawl import UNREACHABLE
from srcrawl.slave.fetch import ERROR_ADDRESS_REFUSED
from srcrawl.urls import InvalidURL, canonicalize, fingerprint, host_of

log = logging.getLogger("srcrawl.master")

MASTER_ID = "master"
_LOCK_TTL_MS = 15_000


class MasterRunning(SrcrawlError):
    """Another crawl master holds this job."""


def seed_message(urls: list[str], strategy_version: int) -> bytes:
    """An nrq message adding depth-0 seeds: how `srcrawl seed` reaches the master.

    It names the strategy version that put the seeds' hosts in scope, so the
    master reloads the strategy before it judges them.
    """
    return encode("seed", {"urls": urls, "strategy": strategy_version})


def fetch_task(
    url: str,
    fp: int,
    depth: int,
    queue: str,
    tries: int = 0,
    *,
    failed: int = 0,
    again: bool = False,
) -> str:
    """A task of srq; ``tries``: its robots.txt deferrals, ``failed``: its failed fetches,
    ``again``: a URL fetched once more, at a shorter depth found later."""
    fields = {"url": url, "fp": fp, "depth": depth, "q": queue, "tries": tries}
    if failed:
        fields["failed"] = failed
    if again:
        fields["again"] = 1
    return encode("fetch", fields).decode()


class CrawlMaster:
    """Runs one crawl job until it is complete (or forever with ``keep_running``)."""

    def __init__(
        self, cfg: Config, *, batch: int = DEFAULT_MASTER_BATCH, wait_for_work: bool = False
    ) -> None:
        self.cfg = cfg
        self.client = cfg.redis()
        self.keys = cfg.keys
        self.queues = PhaseQueues(self.client, self.keys, "crawl")
        strategy = load_strategy(self.client, self.keys)
        while strategy is None:
            if not wait_for_work:
                raise SrcrawlError(
                    f"job {cfg.job!r} has no crawl: start it with `srcrawl crawl SEED…`, "
                    "`srcrawl master start SEED…` or `srcrawl seed URL…`"
                )
            time.sleep(1.0)
            strategy = load_strategy(self.client, self.keys)
        self.strategy: CrawlStrategy = strategy
        self.scope = Scope(strategy)
        self.seen = SeenSet(self.client, self.keys, error_rate=strategy.bloom_error_rate)
        self.recent = ClockCache(DEFAULT_SEEN_CACHE)
        self.frontier = Frontier(
            self.client, self.keys, self.queues.srq.key, self.queues.nrq.processing_key(MASTER_ID)
        )
        self.batch = batch
        self.stopping = threading.Event()
        # every Redis command waits out an outage (until the master is told to stop)
        wait_out_outages(self.client, RedisOutage(log, stopping=self.stopping))
        self._no_slave_since: float | None = time.monotonic()
        self._said_no_slave = False
        self.host_pages: dict[str, int] = {}
        self._lock_token = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"
        self._last_reap = 0.0
        self.backlog = 0
        self._record_above: int | None = None
        self._checks: dict[int, tuple[str, int, str]] = {}
        """Most tasks waiting in srq (0: no bound until slaves report their fetch threads)."""

    def reload_strategy(self) -> None:
        strategy = load_strategy(self.client, self.keys)
        if strategy is not None and strategy.version != self.strategy.version:
            self.strategy = strategy
            self.scope = Scope(strategy)

    # -- lifecycle -------------------------------------------------------------
    def acquire(self, *, wait: bool = True) -> None:
        """Take the job's master lock, then recover what a previous master left."""
        # a master that died holds the lock until its TTL lapses: wait that long
        deadline = time.monotonic() + (_LOCK_TTL_MS / 1000 + 1 if wait else 0)
        lock = self.keys.master_lock
        while not self.client.set(lock, self._lock_token, nx=True, px=_LOCK_TTL_MS):
            if self._holder_is_dead():
                continue
            if time.monotonic() >= deadline:
                holder = (self.client.get(lock) or b"?").decode()
                raise MasterRunning(
                    f"a crawl master is already running for job {self.cfg.job!r} ({holder})"
                )
            time.sleep(0.2)
        # a previous master's half-processed batch goes back to the head of nrq
        self.queues.nrq.requeue(MASTER_ID)
        replayed = self.seen.load()
        self.host_pages = {
            k.decode(): int(v) for k, v in self.client.hgetall(self.keys.crawl_host_pages).items()
        }
        self.client.hsetnx(self.keys.crawl_state, "level", 0)
        self.client.hset(
            self.keys.crawl_state, mapping={"state": "running", "updated": time.time()}
        )
        log.info("master up: seen set %d (+%d replayed)", len(self.seen), replayed)

    def _holder_is_dead(self) -> bool:
        """True (and the lock dropped) if its holder was a process on this host that is gone."""
        holder = self.client.get(self.keys.master_lock)
        if not holder:
            return True
        host, _, rest = holder.decode().partition(":")
        pid = rest.partition(":")[0]
        if host != socket.gethostname() or not pid.isdigit():
            return False
        try:
            os.kill(int(pid), 0)
            return False
        except ProcessLookupError:
            pass
        except PermissionError:  # alive, someone else's
            return False
        pipe = self.client.pipeline(transaction=True)
        pipe.watch(self.keys.master_lock)
        try:
            if pipe.get(self.keys.master_lock) == holder:
                pipe.multi()
                pipe.delete(self.keys.master_lock)
                pipe.execute()
        except redis.WatchError:
            pass
        finally:
            pipe.reset()
        return True

    def release(self) -> None:
        # only delete the lock if it is still ours
        if self.client.get(self.keys.master_lock) == self._lock_token.encode():
            self.client.delete(self.keys.master_lock)

    def install_signal_handlers(self) -> None:
        """First signal: finish the batch in hand. Second: leave at once."""
        install_stop_handlers(self.stopping)

    def run(self, *, keep_running: bool = False) -> bool:
        """Crawl until complete (True) or stopped (False)."""
        self.acquire()
        try:
            return self._loop(keep_running)
        except REDIS_DOWN:
            if not self.stopping.is_set():
                raise
            log.error("stopped while Redis is unreachable")
            return False
        finally:
            with contextlib.suppress(*REDIS_DOWN):
                self.release()

    # -- the loop ----------------------------------------------------------------
    def _loop(self, keep_running: bool) -> bool:
        next_ready = now_ms()
        while not self.stopping.is_set():
            self._housekeeping()
            msgs = self._next_messages(next_ready)
            if msgs:
                self.process(msgs)
            released, next_ready = self.frontier.schedule(backlog=self.backlog)
            if msgs or released:
                next_ready = now_ms()
                continue
            state = self.frontier.level_state(self.queues.nrq.key)
            if state.level_done and not self.queues.nrq.pending(MASTER_ID):
                if state.next:
                    self._advance_level(lagging=state.lagging > 0)
                    continue
                if not keep_running and not state.lagging:
                    self._finish()
                    return True
        return False

    def _next_messages(self, due_ms: int) -> list[bytes]:
        """nrq messages, waiting for them until ``due_ms`` (-1: no host is due before one comes).

        An outcome wakes the blocking pop at once, but Redis ends a blocking
        timeout only on its timer tick: the pop blocks until a tick before the
        due time and the rest is polled, so a host is released on time.
        """
        if due_ms < 0:
            return self.queues.nrq.pop(MASTER_ID, self.batch, timeout=DEFAULT_MASTER_IDLE_WAIT)
        wait = min(DEFAULT_MASTER_IDLE_WAIT + REDIS_TIMER_TICK, (due_ms - now_ms()) / 1000)
        if wait > REDIS_TIMER_TICK:
            return self.queues.nrq.pop(MASTER_ID, self.batch, timeout=wait - REDIS_TIMER_TICK)
        msgs = self.queues.nrq.pop(MASTER_ID, self.batch)
        if not msgs and wait > 0:
            time.sleep(min(wait, DEFAULT_MASTER_POLL))
        return msgs

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._last_reap < DEFAULT_HEARTBEAT_INTERVAL:
            return
        self._last_reap = now
        self.reload_strategy()
        self.client.set(self.keys.master_lock, self._lock_token, px=_LOCK_TTL_MS)
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
            self.seen.snapshot()

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
                "`srcrawl slave start`", now - self._no_slave_since,
            )  # fmt: skip

    def _advance_level(self, *, lagging: bool) -> None:
        # scheduling pauses while a level is released, so no task of the new
        # level runs before all of it is queued (see Frontier)
        if lagging:  # from now on, depths are recorded (see Frontier)
            level = self.client.hget(self.keys.crawl_state, "level") or b"0"
            self.client.hsetnx(self.keys.crawl_state, "record_above", level)
        self.client.hincrby(self.keys.crawl_state, "level", 1)
        while self.frontier.advance() > 0:
            pass

    def _finish(self) -> None:
        self.seen.snapshot()
        improved = self.frontier.improved_depths()
        if improved:  # a page may have been stored from its deeper fetch last
            self.cfg.store().set_depths(improved)
        stats = self.counters()
        self.client.hset(
            self.keys.crawl_state, mapping={"state": "complete", "finished": time.time()}
        )
        started = self.client.hget(self.keys.crawl_state, "started")
        self.cfg.store().set_job(
            self.cfg.job, "crawl", "complete", stats,
            started_at=float(started) if started else None, finished_at=time.time(),
        )  # fmt: skip

    def counters(self) -> dict[str, int]:
        raw = self.client.hgetall(self.keys.stats("crawl"))
        return {k.decode(): int(v) for k, v in raw.items()}

    # -- one batch ------------------------------------------------------------------
    def process(self, msgs: list[bytes]) -> None:
        """Turn a batch of nrq messages into one atomic frontier commit."""
        batch = Batch(acks=len(msgs))
        level, above = self.client.hmget(self.keys.crawl_state, ["level", "record_above"])
        level = int(level or 0)
        self._record_above = int(above) if above is not None else None
        self._checks: dict[int, tuple[str, int, str]] = {}
        for raw in msgs:
            try:
                msg = decode(raw)
            except EnvelopeError:
                batch.count("bad_messages")
                continue
            self._apply(msg, batch, level)
        self._improve(batch)
        journal = self.seen.take_journal()
        try:
            self.frontier.commit(batch, journal)
        except Exception:
            # the filter already holds fingerprints that were not committed:
            # rebuild it from what Redis has before anything else is decided
            self.seen.load()
            raise

    def _apply(self, msg: Message, batch: Batch, level: int) -> None:
        kind = msg.kind
        if kind == "seed":
            if int(msg.get("strategy", 0)) > self.strategy.version:
                self.reload_strategy()
            for url in msg.get("urls", []):
                self._candidate(url, 0, batch, level)
            return
        if kind == "error":  # a slave's handler failed on these tasks: release their queues
            batch.count("slave_errors")
            for raw in msg.payload.split(b"\n") if msg.payload else []:
                try:
                    task = decode(raw)
                except EnvelopeError:
                    continue
                if task.get("q"):
                    batch.done.append([task.get("q"), -1])
            return
        queue = msg.get("q")
        if not queue:
            batch.count("bad_messages")
            return
        s = self.strategy
        fetch_ms = float(msg.get("fetch_ms", 0))
        if kind == "fetched":
            batch.done.append([queue, now_ms() + s.politeness_ms(fetch_ms, msg.get("crawl_delay"))])
            batch.count("refetched" if msg.get("again") else "pages")
            status, error = int(msg.get("status", 0)), msg.get("error")
            if error:  # a cut-off or failed response is no good page, whatever its status
                batch.count("fetch_errors")
                batch.count(f"error_{error}")
                if error == ERROR_ADDRESS_REFUSED:
                    batch.count("address_refused")
            else:
                batch.count(f"status_{status // 100}xx" if status > 0 else "fetch_errors")
            if msg.get("invalid"):
                batch.count("invalid_urls", int(msg.get("invalid")))
            depth = int(msg.get("depth", 0)) + 1
            for url in msg.get("links", []):
                self._candidate(url, depth, batch, level)
        elif kind == "robots":  # the task fetched robots.txt: the URL itself comes next
            batch.count("robots_fetched")
            batch.errors[host_of(msg.get("url"))] = ""
            batch.retry.append(
                [
                    queue,
                    msg.get("task"),
                    now_ms() + s.politeness_ms(fetch_ms, msg.get("crawl_delay")),
                ]
            )
        elif kind == "retry":  # a passing failure: the URL goes back to its queue's head
            self._retry(msg, queue, batch, fetch_ms)
        elif kind == "disallowed":
            batch.count("robots_disallowed")
            batch.done.append([queue, -1])
        elif kind == "deferred":
            self._deferred(msg, batch, queue)
            return
        else:
            batch.count("bad_messages")
            return
        batch.lag[queue] = 0  # the host answered: its queue counts for the level again

    def _deferred(self, msg: Message, batch: Batch, queue: str) -> None:
        """A task whose host's robots.txt could not be had: retry it later, or give it up.

        A host that could not even be connected to gets fewer tries than one
        that answered 5xx: it is most likely a mistyped or stopped seed.
        """
        task = decode(msg.get("task", ""))
        tries = int(task.get("tries", 0)) + 1
        reason = msg.get("reason")  # only when robots.txt was just fetched, not from the cache
        limit = DEFAULT_ROBOTS_TRIES_UNREACHABLE if reason in UNREACHABLE else DEFAULT_ROBOTS_TRIES
        retry_at = None
        if tries >= limit:
            batch.count("robots_gave_up")
            batch.done.append([queue, -1])
            batch.lag[queue] = 0
        else:
            batch.count("robots_deferred")
            again = bool(task.get("again"))
            retry = fetch_task(task.get("url"), task.get("fp"), task.get("depth"), queue, tries,
                               again=again, failed=int(task.get("failed", 0)))  # fmt: skip
            until = int(float(msg.get("until", 0)) * 1000)
            wait = self.strategy.politeness_ms(float(msg.get("fetch_ms", 0)), None)
            retry_at = max(until, now_ms() + wait)
            batch.retry.append([queue, retry, retry_at])
            # a short wait costs the level little: keep the barrier (exact without
            # bookkeeping); only a host deferred for longer stops holding the others
            batch.lag[queue] = int(retry_at - now_ms() >= DEFAULT_LAG_AFTER * 1000)
        if reason:
            record = {"what": "robots.txt", "reason": reason, "try": tries, "tries": limit,
                      "retry_at": retry_at / 1000 if retry_at else None}  # fmt: skip
            batch.errors[host_of(task.get("url"))] = json.dumps(record)

    def _improve(self, batch: Batch) -> None:
        """URLs found again by a shorter path than the depth they were scheduled at: record
        the new depth and fetch them again at it, so that their links get it too."""
        if not self._checks:
            return
        fps = [fp for fp in self._checks if fp not in batch.depths]
        recorded = dict(zip(fps, self.frontier.recorded_depths(fps), strict=True))
        for fp, (url, depth, queue) in self._checks.items():
            was = batch.depths.get(fp, recorded.get(fp))
            if was is None or was <= depth:
                continue
            batch.depths[fp] = batch.improved[fp] = depth
            batch.now.append([queue, fetch_task(url, fp, depth, queue, again=True)])
            batch.count("depth_improved")

    def _retry(self, msg: Message, queue: str, batch: Batch, fetch_ms: float) -> None:
        """Queue a failed fetch again after a back-off, its host still polite meanwhile."""
        s = self.strategy
        try:
            task = decode(msg.get("task", ""))
        except EnvelopeError:
            batch.count("bad_messages")
            batch.done.append([queue, -1])
            return
        failed = int(task.get("failed", 0)) + 1
        retry = fetch_task(task.get("url"), task.get("fp"), task.get("depth"), queue,
                           int(task.get("tries", 0)), failed=failed,
                           again=bool(task.get("again")))  # fmt: skip
        batch.count("fetch_retries")
        batch.count(f"retry_{msg.get('error') or 'status_' + str(msg.get('status', 0))}")
        wait = max(s.retry_ms(failed, msg.get("retry_after")),
                   s.politeness_ms(fetch_ms, msg.get("crawl_delay")))  # fmt: skip
        batch.retry.append([queue, retry, now_ms() + wait])

    def _candidate(self, url: str, depth: int, batch: Batch, level: int) -> None:
        # A link found behind the current level (on a page of a lagging queue)
        # may be a shorter path to a URL scheduled deeper: see Frontier.
        behind = self._record_above is not None and depth <= level
        # most links are repeats [seed 004]: a URL string already judged seen is
        # a duplicate whatever its depth, without canonicalizing it again
        if url in self.recent and not behind:
            self.recent.seen_or_add(url)
            batch.count("duplicates")
            return
        try:
            canonical = canonicalize(url)
        except InvalidURL:
            batch.count("invalid_urls")
            return
        reason = self.scope.reject(canonical, depth)
        if reason is not None:
            batch.count(reason)
            return
        host = host_of(canonical)
        cap = self.strategy.max_pages_per_host
        if cap and self.host_pages.get(host, 0) >= cap:
            batch.count("host_cap")
            return
        fp = fingerprint(canonical)
        is_new = self.seen.add(fp)
        self.recent.seen_or_add(url)
        if self.strategy.queue_policy == "hash":
            queue = f"bucket-{fp % self.strategy.hash_buckets}"
        else:
            queue = host
        if not is_new:
            batch.count("duplicates")
            if behind and depth < self._checks.get(fp, ("", depth + 1, ""))[1]:
                self._checks[fp] = (canonical, depth, queue)
            return
        if cap:
            self.host_pages[host] = self.host_pages.get(host, 0) + 1
            batch.hosts[host] = batch.hosts.get(host, 0) + 1
        if self._record_above is not None and depth > self._record_above + 1:
            batch.depths[fp] = depth
        task = fetch_task(canonical, fp, depth, queue)
        batch.count("scheduled")
        if depth <= level:
            batch.now.append([queue, task])
        else:
            batch.next.append(task)


def reset_crawl(cfg: Config) -> None:
    """Forget a job's crawl state (frontier, seen set, queues); the store is kept."""
    client = cfg.redis()
    k = cfg.keys
    q = PhaseQueues(client, k, "crawl")
    doomed = [*k.crawl_keys(), q.srq.key, q.nrq.key, k.master_lock]
    doomed += [key for key in client.scan_iter(match=f"{k.crawl_queue_prefix}*", count=1000)]
    for queue in (q.srq, q.nrq):
        doomed += list(client.scan_iter(match=processing_pattern(queue.key), count=1000))
    for i in range(0, len(doomed), 1000):
        client.delete(*doomed[i : i + 1000])


def crawl_state(cfg: Config) -> dict[str, str]:
    raw = cfg.redis().hgetall(cfg.keys.crawl_state)
    return {k.decode(): v.decode() for k, v in raw.items()}
