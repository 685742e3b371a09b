"""The index master: schedules unindexed pages and writes the index [Redis engine §3.2].

It pages through the store's unindexed pages (``indexed_at IS NULL``: never
indexed, or fetched again since) and keeps a window of tasks, each a batch
of page ids with a serial from ``trq``, queued in ``srq``. Slaves answer in
``nrq`` with the pages' tokens (indexer/documents.py). The master is the only
writer of the index, a Tantivy directory (indexer/engine.py): it moves
results into its processing list, lets them gather (up to
``DEFAULT_INDEX_MERGE_DOCS`` documents or ``DEFAULT_INDEX_MERGE_WAIT``
seconds, and at the end of a run no more than the pages still out with
slaves), writes them in one Tantivy commit, then marks the pages indexed in
the store, and acknowledges the results last. A master killed between any two
of these steps leaves the results to be written again, which changes nothing:
a page's document replaces the one it had (deleted by its fingerprint), so
nothing doubles, and a page is never marked indexed before its commit. While
it waits it reaps dead workers, whose unacknowledged tasks go back to ``srq``.

With ``follow`` (``srcrawl index --follow``) the run does not end when every
page is merged: it looks again for unindexed pages (stored since, or stored
again: ``save_fetched`` resets ``indexed_at``) every quarter of the delay it
aims at, merges what it holds within half of it, renews its lease all the
while, and leaves at the end of the step it is in once ``stopping`` is set
(SIGINT, SIGTERM). It measures how long new pages take from their store write
to being searchable (``indexer/freshness.py``) and publishes the p50/p95 in
its heartbeat and in the phase's counters (``srcrawl status``).

One master per job: it holds the phase's lease (``queues/lease.py``) and
fences what it commits with it (``_merge``), so a master that stalled past
the lease's TTL while a successor took over stops with LeaseLost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import redis

from srcrawl.config import Config
from srcrawl.defaults import (
    DEFAULT_BLOCK_TIMEOUT,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_HEARTBEAT_TTL,
    DEFAULT_INDEX_BATCH_PAGES,
    DEFAULT_INDEX_FOLLOW_LOG_INTERVAL,
    DEFAULT_INDEX_MERGE_DOCS,
    DEFAULT_INDEX_MERGE_WAIT,
    DEFAULT_INDEX_REAP_INTERVAL,
    DEFAULT_INDEX_REMOVE_BATCH,
    DEFAULT_INDEX_WINDOW,
    DEFAULT_MASTER_LEASE_TTL,
)
from srcrawl.errors import EnvelopeError, LeaseLost, SrcrawlError
from srcrawl.indexer.documents import unpack
from srcrawl.indexer.engine import IndexDoc, IndexWriter
from srcrawl.indexer.freshness import Freshness
from srcrawl.indexer.protocol import (
    DOCUMENTS,
    ERROR,
    REFUSED,
    DocumentsResult,
    IndexTask,
    Refusal,
    failed_tasks,
)
from srcrawl.indexer.tokenizer import dictionary_id, user_dict_from_env
from srcrawl.keys import Keys
from srcrawl.outage import REDIS_DOWN, master_waits_out
from srcrawl.queues.envelope import Message, decode
from srcrawl.queues.lease import MasterLease, holder_id
from srcrawl.queues.protocol import PhaseQueues, new_worker_id
from srcrawl.queues.workers import Worker, reap, reaped_sentences, requeued

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

log = logging.getLogger("srcrawl.indexer")

# KEYS[1] this master's processing list of nrq; ARGV[1] how many results it holds.
# Acknowledges the merged results: the master pops into its own processing
# list, which starts empty, and merges all it popped, so they are its head.
# Run fenced (the lease checked in the same step): a master that lost its
# lease leaves them for its successor.
_ACK_MERGED = """
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
return 1
"""


class LocalSlaves(Protocol):
    """The slave processes a run started on this machine (``srcrawl.local``)."""

    def alive(self) -> int: ...


class IndexerError(SrcrawlError):
    """The index phase cannot go on (every local slave died, …)."""


@dataclass
class IndexReport:
    """What one run of the index master did."""

    scheduled: int = 0  # pages sent to slaves
    indexed: int = 0  # documents written into the index (each replacing the page's last)
    stale: int = 0  # documents skipped: page fetched again (or deleted) meanwhile
    missing: int = 0  # page ids a slave found no page for
    failed: int = 0  # pages of tasks a slave refused or failed on (left unindexed)
    merges: int = 0  # Tantivy commits of documents
    merge_s: float = 0.0  # time writing and committing them, marking the pages
    wall_s: float = 0.0
    requeued: int = 0  # tasks of dead workers returned to srq
    scans: int = 0  # passes over the unindexed pages (more than one only with follow)
    # pages stored after the run started, and their delay to searchable (see freshness.py)
    freshness: dict = field(default_factory=dict)
    removed: int = 0  # pages that went away (404, 410, a redirect) taken out of the index
    errors: list[str] = field(default_factory=list)

    @property
    def pages_per_s(self) -> float:
        return self.indexed / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "pages_per_s": round(self.pages_per_s, 1)}


class IndexMaster:
    """One run of the index phase for a job, as the single writer of its index."""

    def __init__(
        self,
        client: redis.Redis,
        store: Store,
        keys: Keys,
        index_path: Path,
        *,
        lease_ttl: float = DEFAULT_MASTER_LEASE_TTL,
        batch_pages: int = DEFAULT_INDEX_BATCH_PAGES,
        window: int = DEFAULT_INDEX_WINDOW,
        merge_docs: int = DEFAULT_INDEX_MERGE_DOCS,
        merge_wait: float = DEFAULT_INDEX_MERGE_WAIT,
        user_dict: str | None = None,
        reap_interval: float = DEFAULT_INDEX_REAP_INTERVAL,
        heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL,
        block_timeout: float = DEFAULT_BLOCK_TIMEOUT,
        follow: float | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        """The master of ``keys``'s job, writing the index at ``index_path`` under a
        lease of ``lease_ttl`` seconds. ``follow``: keep indexing new pages, aiming at
        this delay in seconds (see the module doc); None: index what is unindexed and
        end. ``stopping``: once set, a run ends after the step it is in."""
        if batch_pages < 1 or window < 1 or merge_docs < 1:
            raise ValueError("batch_pages, window and merge_docs must be positive")
        self.stopping = stopping if stopping is not None else threading.Event()
        merge_wait = self._set_follow(follow, merge_wait)
        self.client, self.store, self.keys = client, store, keys
        self.q = PhaseQueues(self.client, self.keys, "index")
        self.batch_pages, self.window = batch_pages, window
        self.merge_docs, self.merge_wait = merge_docs, merge_wait
        self.dictionary = dictionary_id(user_dict_from_env() if user_dict is None else user_dict)
        self.reap_interval = reap_interval
        self.heartbeat_ttl = heartbeat_ttl
        self.block_timeout = block_timeout
        self.id = new_worker_id(self.client, self.keys, "index-master")
        self.worker = Worker(
            self.client, self.keys, self.id, [self.q.nrq], role="master", ttl=heartbeat_ttl
        )
        self.lease = MasterLease(
            self.client, self.keys.master_lease("index"), holder_id(self.id), lease_ttl
        )
        # renewed well within its TTL, however short the TTL is set
        self.renew_interval = min(DEFAULT_HEARTBEAT_INTERVAL, lease_ttl / 3)
        self._ack_merged = self.lease.script(_ACK_MERGED)
        self.report = IndexReport()
        self._outstanding: dict[int, int] = {}  # batch serial -> pages
        self._cursor: int | None = None
        self._scanned_all = False
        self._held: list[bytes] = []  # results popped, not yet merged nor acknowledged
        self._batches: list[list[IndexDoc]] = []  # their documents
        self.writer = IndexWriter(index_path)  # it commits only under the lease
        self._held_docs = 0
        self._held_since = 0.0
        self._handlers: dict[str, Callable[[Message], None]] = {
            DOCUMENTS: self._on_documents,
            REFUSED: self._on_refused,
            ERROR: self._on_error,
        }

    @classmethod
    def from_config(cls, cfg: Config, **options: Any) -> IndexMaster:
        """The master of the configured job; ``options`` as for the constructor."""
        return cls(
            cfg.redis(), cfg.store(), cfg.keys, cfg.index_path, lease_ttl=cfg.lease_ttl, **options
        )

    def _set_follow(self, follow: float | None, merge_wait: float) -> float:
        """Set up following (None: a single pass); the merge wait to use."""
        if follow is not None and follow <= 0:
            raise ValueError("the follow delay must be positive")
        self.follow = follow
        # look for new pages every quarter of the delay, merge within half of it
        self.poll = max(0.1, follow / 4) if follow else 0.0
        self.freshness = Freshness(since=time.time())
        self._next_scan = 0.0  # monotonic time of the next pass
        self._last_log = time.monotonic()
        self._say: Callable[[str], None] = log.info
        return min(merge_wait, max(0.1, follow / 2)) if follow else merge_wait

    # -- the run -----------------------------------------------------------------
    def run(
        self,
        *,
        slaves: LocalSlaves | None = None,
        progress: Callable[[IndexReport], None] | None = None,
        progress_interval: float = 2.0,
        say: Callable[[str], None] | None = None,
    ) -> IndexReport:
        """Index every page unindexed when the scan reaches it; return what was done.

        Raises LeaseHeld if another index master holds the job's lease, and
        LeaseLost (having committed nothing more) if this one loses it. With
        ``slaves`` (local slave processes), gives up with IndexerError once
        all of them have exited while work remains. Following, ``say`` gets a
        line with the delay's p50 and p95 every DEFAULT_INDEX_FOLLOW_LOG_INTERVAL
        seconds and at the end (default: the log).
        """
        self._say = say if say is not None else log.info
        master_waits_out(self.client, log, self.stopping)  # as the crawl master does
        self.lease.acquire(what="index master")
        t0 = time.perf_counter()
        started = time.time()
        self.freshness = Freshness(since=started)
        self.store.set_job(self.keys.job, "index", "running", started_at=started)
        state: str | None = "failed"
        try:
            self.worker.beat(self._stats())
            # tasks a previous master left queued are scheduled again below
            self._fenced(lambda pipe: pipe.delete(self.q.srq.key))
            self._remove_gone()
            self._loop(slaves, progress, progress_interval, t0)
            state = "stopped" if self.follow else "complete"
            if self.follow:
                self._say(f"index --follow stopped: {self.freshness.sentence()}")
        except LeaseLost:
            state = None  # the job's record is its new master's to write
            raise
        except REDIS_DOWN:
            if not self.stopping.is_set():
                raise
            log.error("stopped while Redis is unreachable")
            state = "stopped"
        finally:
            self.report.wall_s = time.perf_counter() - t0
            self.report.freshness = self.freshness.summary()
            # results popped but not merged go back to nrq for the next run
            with contextlib.suppress(*REDIS_DOWN):  # told to stop while Redis is away
                self.worker.retire()
            self.writer.close()
            with contextlib.suppress(*REDIS_DOWN):
                self.lease.release()
            if state is not None:
                self._record(state, started)
        return self.report

    def _record(self, state: str, started: float) -> None:
        """The run's end in the job's record: its state and report."""
        self.store.set_job(
            self.keys.job,
            "index",
            state,
            self.report.as_dict(),
            started_at=started,
            finished_at=time.time(),
        )

    def _loop(
        self,
        slaves: LocalSlaves | None,
        progress: Callable[[IndexReport], None] | None,
        progress_interval: float,
        t0: float,
    ) -> None:
        """Schedule, gather and merge until every scheduled page is merged."""
        last_beat = last_reap = last_progress = time.monotonic()
        while True:
            if self._done():
                return
            self._top_up()
            messages = self.q.nrq.pop(self.id, self._want(), timeout=self._pop_timeout())
            now = time.monotonic()
            if now - last_beat >= self.renew_interval:
                # first: a master that was paused past its TTL learns it here
                self.lease.keep()
                self._publish()
                last_beat = now
            self._take(messages)
            if self._held and self._merge_due():
                self._merge()
            if not messages and self._outstanding and slaves is not None and slaves.alive() == 0:
                raise IndexerError(
                    f"every local index slave exited with {len(self._outstanding)} "
                    "task(s) left; see their logs"
                )
            if now - last_reap >= self.reap_interval:
                self._reap()
                last_reap = now
            if progress is not None and now - last_progress >= progress_interval:
                self.report.wall_s = time.perf_counter() - t0
                self.report.freshness = self.freshness.summary()
                progress(self.report)
                last_progress = now

    def _done(self) -> bool:
        """Whether the run ends now; with follow, starts the next pass when it is due.

        A stopping run ends once what it holds is merged (the tasks still out
        are scheduled again by the next master, which empties srq first).
        """
        if self.stopping.is_set():
            if self._held:
                self._merge()
            return True
        if not self._scanned_all or self._outstanding or self._held:
            return False
        if not self.follow:
            return True
        if time.monotonic() >= self._next_scan:
            # a new pass from the first fingerprint: pages stored (again) since the last,
            # and the pages that went away meanwhile leave the index first
            self._remove_gone()
            self._cursor, self._scanned_all = None, False
            self._next_scan = time.monotonic() + self.poll
        return False

    def _want(self) -> int:
        return max(1, (self.merge_docs - self._held_docs) // self.batch_pages)

    def _pop_timeout(self) -> float:
        """How long to wait for results: never past a due merge or the next pass."""
        timeout = self.block_timeout
        if self._held:
            waited = time.monotonic() - self._held_since
            timeout = min(timeout, max(0.01, self.merge_wait - waited))
        if self.follow and self._scanned_all and not self._outstanding:
            timeout = min(timeout, max(0.01, self._next_scan - time.monotonic()))
        return timeout

    def _publish(self) -> None:
        """Heartbeat, and (following) the delay figures in the phase's counters and the log."""
        stats = self._stats()
        self.worker.beat(stats)
        if not self.follow:
            return
        self._fenced(lambda pipe: pipe.hset(self.keys.stats("index"), mapping=stats))
        if time.monotonic() - self._last_log >= DEFAULT_INDEX_FOLLOW_LOG_INTERVAL:
            self._last_log = time.monotonic()
            self._say(f"index --follow: {self.freshness.sentence()}")

    def _remove_gone(self) -> None:
        """Take the pages that went away since the last pass out of the index first:
        a page fetched again as 404, 410 or a redirect must not be found any more. Its
        document is deleted (if the index has it) and committed before the page is
        marked, so a crash in between deletes it again."""
        while True:
            fps = self.store.unindexable_unmarked(DEFAULT_INDEX_REMOVE_BATCH)
            if not fps:
                return
            self.writer.delete(fps)
            self.writer.commit(before=self.lease.keep)
            self.report.removed += self.store.settle_unindexable(fps, time.time())

    def _reap(self) -> None:
        """Return the tasks of dead workers to their queues."""
        returned = reap(self.client, self.keys)
        if returned:
            self.report.requeued += requeued(returned)
            for sentence in reaped_sentences(returned):
                log.warning("%s", sentence)

    def _fenced(self, fill: Callable[[redis.client.Pipeline], object]) -> None:
        fenced(self.client, self.lease, fill)

    def _top_up(self) -> None:
        """Queue tasks until the window is full or every unindexed page is scheduled."""
        free = self.window - len(self._outstanding)
        if free <= 0 or self._scanned_all:
            return
        if self._cursor is None:
            self.report.scans += 1
        fps = self.store.unindexed_pages(self._cursor, free * self.batch_pages)
        if len(fps) < free * self.batch_pages:
            self._scanned_all = True
        if not fps:
            return
        self._cursor = fps[-1]
        chunks = [fps[i : i + self.batch_pages] for i in range(0, len(fps), self.batch_pages)]
        serials = self.q.trq.reserve("batch", len(chunks))
        tasks = []
        for serial, chunk in zip(serials, chunks, strict=True):
            self._outstanding[serial] = len(chunk)
            tasks.append(IndexTask(serial, chunk, self.dictionary).encode())
        self._fenced(lambda pipe: pipe.rpush(self.q.srq.key, *tasks))
        self.report.scheduled += len(fps)

    def _merge_due(self) -> bool:
        """Whether the held results are to be merged now.

        Once every page is scheduled, they are merged as soon as they are as
        many as the pages still out with slaves: the merges that end the run
        halve in size, so the last one, which no slave work overlaps, is small.
        """
        if self._held_docs >= self.merge_docs or not self._outstanding:
            return True
        if self._scanned_all and self._held_docs >= sum(self._outstanding.values()):
            return True
        return time.monotonic() - self._held_since >= self.merge_wait

    # -- results: one handler per kind -----------------------------------------
    def _take(self, messages: list[bytes]) -> None:
        """Hold popped results until the next merge; note which tasks are answered."""
        if not messages:
            return
        if not self._held:
            self._held_since = time.monotonic()
        self._held.extend(messages)
        for raw in messages:
            try:
                msg = decode(raw)
            except EnvelopeError as e:
                self._error(f"dropped a malformed result: {e}")
                continue
            handler = self._handlers.get(msg.kind)
            if handler is None:
                self._error(f"dropped a result of unknown kind {msg.kind!r}")
            else:
                handler(msg)

    def _on_documents(self, msg: Message) -> None:
        try:
            result = DocumentsResult.from_message(msg)
            docs = unpack(result.payload)
        except EnvelopeError as e:
            self._fail_batch(msg.get("batch"), f"dropped malformed documents: {e}")
            return
        self._batches.append(docs)
        self._held_docs += len(docs)
        self.report.missing += result.missing
        self._outstanding.pop(result.batch, None)

    def _on_refused(self, msg: Message) -> None:
        refusal = Refusal.from_message(msg)
        self._fail_batch(refusal.batch, f"a slave refused a task: {refusal.reason}")

    def _on_error(self, msg: Message) -> None:
        """A slave's handler failed on a batch (a bug): its pages stay unindexed."""
        first = str(msg.get("error", "")).strip().splitlines()
        reason = first[-1] if first else "unknown error"
        for task in failed_tasks(msg):
            self._fail_batch(task.batch, f"a slave failed on a task: {reason}")

    # -- the merge: Tantivy, then the store, then Redis, all fenced ----------------
    def _merge(self) -> None:
        """Write the held documents in one Tantivy commit, mark their pages indexed, then
        acknowledge their results.

        The lease is checked right before the commit (a master that lost it rolls
        back and raises LeaseLost) and again by the acknowledgement. A master paused
        between that check and its commit may commit once late; that cannot corrupt
        the index: Tantivy's writer lock lets one master write at a time, and a
        document replaces its page's last (by fingerprint), so the late commit is
        one more write of the same pages' same text. A page is marked indexed only
        if it was not fetched again since (``Store.mark_indexed``).
        """
        if self._held_docs:
            t0 = time.perf_counter()
            latest: dict[int, IndexDoc] = {}
            for docs in self._batches:
                latest.update((d.fp, d) for d in docs)  # of a page listed twice, the last
            current = self.store.fetched_at(list(latest))
            kept = [d for d in latest.values() if current.get(d.fp) == d.fetched_at]
            self.report.stale += len(latest) - len(kept)
            if kept:
                self.writer.replace(kept)
                self.writer.commit(before=self.lease.keep)
                now = time.time()
                self.store.mark_indexed([(d.fp, d.fetched_at) for d in kept], now)
                self.freshness.add([d.fetched_at for d in kept], now)  # searchable now
                self.report.merges += 1
                self.report.indexed += len(kept)
            self.report.merge_s += time.perf_counter() - t0
        # after the commit: a crash before this line replays the results
        self._ack_merged(keys=[self.q.nrq.processing_key(self.id)], args=[len(self._held)])
        self._held, self._batches, self._held_docs = [], [], 0

    def _fail_batch(self, batch: object, reason: str) -> None:
        pages = self._outstanding.pop(batch, 0) if isinstance(batch, int) else 0
        self.report.failed += pages
        self._error(reason)

    def _error(self, reason: str) -> None:
        log.warning("%s", reason)
        if len(self.report.errors) < 20 and reason not in self.report.errors:
            self.report.errors.append(reason)

    def _stats(self) -> dict[str, float]:
        stats: dict[str, float] = {
            "indexed": self.report.indexed,
            "outstanding": len(self._outstanding),
            "merge_s": round(self.report.merge_s, 3),
        }
        if self.follow:
            fresh = self.freshness.summary()
            stats["fresh_pages"] = self.freshness.pages
            for name in ("delay_p50_s", "delay_p95_s"):
                if fresh[name] is not None:
                    stats[name] = fresh[name]
        return stats


def fenced(
    client: redis.Redis, lease: MasterLease, fill: Callable[[redis.client.Pipeline], object]
) -> None:
    """Run the commands ``fill`` queues as one transaction, only while ``lease`` is held."""
    while True:
        # transaction=True: a cluster client's pipelines default to none
        with client.pipeline(transaction=True) as pipe:
            lease.guard(pipe)
            fill(pipe)
            try:
                pipe.execute()
                return
            except redis.WatchError:
                # the lease changed meanwhile: LeaseLost if it is no longer ours
                lease.keep()
