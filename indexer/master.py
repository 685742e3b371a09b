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

With ``SRCRAWL_INDEX_DIR=s3://…`` each commit is published to the object store before
its pages are marked (indexer/publisher.py): an outage of the store holds the merge (and
the marks) until the store is back, and replicas never hold less than what is marked.

One master per job: it holds the phase's lease (``queues/lease.py``) and
fences what it commits with it (``_merge``), so a master that stalled past
the lease's TTL while a successor took over stops with LeaseLost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import redis

from srcrawl.core.defaults import (
    DEFAULT_BLOCK_TIMEOUT,
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
from srcrawl.core.errors import SrcrawlError
from srcrawl.core.keys import Keys
from srcrawl.indexer.engine import IndexWriter
from srcrawl.indexer.freshness import Freshness
from srcrawl.indexer.held_results import HeldResults
from srcrawl.indexer.published import Commit, IndexObjects
from srcrawl.indexer.publisher import IndexPublisher
from srcrawl.indexer.report import IndexReport
from srcrawl.indexer.task_window import TaskWindow
from srcrawl.indexer.tokenizer import dictionary_id, user_dict_from_env
from srcrawl.queues.master_session import JobRecord, MasterSession
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.workers import requeued
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

__all__ = ["IndexMaster", "IndexReport", "IndexerError", "LocalSlaves"]

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
    """The slave processes a run started on this machine (``srcrawl.app.local``)."""

    def alive(self) -> int: ...


class IndexerError(SrcrawlError):
    """The index phase cannot go on (every local slave died, …)."""


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
        publish_to: IndexObjects | None = None,
        writer: IndexWriter | None = None,
    ) -> None:
        """The master of ``keys``'s job, writing the index at ``index_path`` under a
        lease of ``lease_ttl`` seconds. ``follow``: keep indexing new pages, aiming at
        this delay in seconds (see the module doc); None: index what is unindexed and
        end. ``stopping``: once set, a run ends after the step it is in. ``publish_to``:
        the object store each commit is published to (indexer/publisher.py) before its
        pages are marked indexed. ``writer``: the index written instead (a rebuild's)."""
        if batch_pages < 1 or window < 1 or merge_docs < 1:
            raise ValueError("batch_pages, window and merge_docs must be positive")
        self.client, self.store, self.keys = client, store, keys
        self.q = PhaseQueues(client, keys, "index")
        # the lease, the heartbeat, the outage wait and the run's endings
        self.session = MasterSession(
            client,
            keys,
            "index",
            lease_ttl=lease_ttl,
            log=log,
            stopping=stopping,
            worker_queues=[self.q.nrq],
            heartbeat_ttl=heartbeat_ttl,
        )
        self.session.stats = self._stats
        self.id, self.lease = self.session.id, self.session.lease
        self.stopping = self.session.stopping
        merge_wait = self._set_follow(follow, merge_wait)
        self.batch_pages = batch_pages
        self.merge_docs, self.merge_wait = merge_docs, merge_wait
        self.dictionary = dictionary_id(user_dict_from_env() if user_dict is None else user_dict)
        self.reap_interval, self.block_timeout = reap_interval, block_timeout
        self._ack_merged = self.session.script(_ACK_MERGED)
        self.report = IndexReport()
        self.tasks = TaskWindow(store, self.q.trq, window, batch_pages, self.dictionary)
        self.held = HeldResults(self.report, self.tasks.outstanding)
        # it commits (and publishes) only under the lease
        self.writer = writer if writer is not None else self._writer_of(index_path, publish_to)

    def _writer_of(self, index_path: Path, publish_to: IndexObjects | None) -> IndexWriter:
        """The writer of the index at ``index_path``, each commit published to ``publish_to``."""
        publisher = None
        if publish_to is not None:
            publisher = IndexPublisher(
                publish_to, index_path, on_published=self._published, stopping=self.stopping
            )
        return IndexWriter(index_path, publisher=publisher)

    @classmethod
    def from_config(cls, cfg: Config, **options: Any) -> IndexMaster:
        """The master of the configured job; ``options`` as for the constructor."""
        if cfg.index_url is not None:
            options.setdefault("publish_to", IndexObjects(cfg.index_url, cfg.job))
        return cls(
            cfg.redis(),
            cfg.store(),
            cfg.keys,
            cfg.index_work_path,
            lease_ttl=cfg.lease_ttl,
            **options,
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
        self.session.acquire(what="index master")
        t0 = time.perf_counter()
        record = JobRecord(self.store, self.keys.job, "index", self.report.as_dict)
        with self.session.running(record=record) as run:
            self.freshness = Freshness(since=run.started)
            try:
                # tasks a previous master left queued are scheduled again below
                self.session.fenced(lambda pipe: pipe.delete(self.q.srq.key))
                # with an object store: from the published commit, under the lease
                self.writer.start(self.lease.keep)
                self._remove_gone()
                self._loop(slaves, progress, progress_interval, t0)
                self._complete()
                run.state = "stopped" if self.follow else "complete"
                if self.follow:
                    self._say(f"index --follow stopped: {self.freshness.sentence()}")
            finally:
                # before the worker retires (results popped, not merged, back to nrq)
                self.report.wall_s = time.perf_counter() - t0
                self.report.freshness = self.freshness.summary()
                self.writer.close()
        return self.report

    def _loop(
        self,
        slaves: LocalSlaves | None,
        progress: Callable[[IndexReport], None] | None,
        progress_interval: float,
        t0: float,
    ) -> None:
        """Schedule, gather and merge until every scheduled page is merged."""
        last_reap = last_progress = time.monotonic()
        while True:
            if self._done():
                return
            self._top_up()
            messages = self.q.nrq.pop(self.id, self._want(), timeout=self._pop_timeout())
            now = time.monotonic()
            # first: a master that was paused past its TTL learns it here
            if self.session.keep_alive():
                self._publish()
            self.held.take(messages)
            if self.held.raw and self._merge_due():
                self._merge()
            out = self.tasks.outstanding
            if not messages and out and slaves is not None and slaves.alive() == 0:
                raise IndexerError(
                    f"every local index slave exited with {len(out)} task(s) left; see their logs"
                )
            if now - last_reap >= self.reap_interval:
                self.report.requeued += requeued(self.session.reap())
                last_reap = now
            if progress is not None and now - last_progress >= progress_interval:
                self.report.wall_s = time.perf_counter() - t0
                self.report.freshness = self.freshness.summary()
                progress(self.report)
                last_progress = now

    def _complete(self) -> None:
        """Once every page is merged, still under the lease: nothing more to do here (a
        rebuild puts its index in place of the old one, indexer/rebuild.py)."""

    def _done(self) -> bool:
        """Whether the run ends now; with follow, starts the next pass when it is due.

        A stopping run ends once what it holds is merged (the tasks still out
        are scheduled again by the next master, which empties srq first).
        """
        if self.stopping.is_set():
            if self.held.raw:
                self._merge()
            return True
        if not self.tasks.scanned_all or self.tasks.outstanding or self.held.raw:
            return False
        if not self.follow:
            return True
        if time.monotonic() >= self._next_scan:
            # a new pass from the first fingerprint: pages stored (again) since the last,
            # and the pages that went away meanwhile leave the index first
            self._remove_gone()
            self.tasks.new_pass()
            self._next_scan = time.monotonic() + self.poll
        return False

    def _want(self) -> int:
        return max(1, (self.merge_docs - self.held.docs) // self.batch_pages)

    def _pop_timeout(self) -> float:
        """How long to wait for results: never past a due merge or the next pass."""
        timeout = self.block_timeout
        if self.held.raw:
            waited = time.monotonic() - self.held.since
            timeout = min(timeout, max(0.01, self.merge_wait - waited))
        if self.follow and self.tasks.scanned_all and not self.tasks.outstanding:
            timeout = min(timeout, max(0.01, self._next_scan - time.monotonic()))
        return timeout

    def _publish(self) -> None:
        """Following, the delay figures in the phase's counters and the log (the
        heartbeat carries them too: ``_stats``)."""
        if not self.follow:
            return
        stats = self._stats()
        self.session.fenced(lambda pipe: pipe.hset(self.keys.stats("index"), mapping=stats))
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

    def _top_up(self) -> None:
        """Queue tasks until the window is full or every unindexed page is scheduled."""
        tasks, pages = self.tasks.top_up()
        self.report.scans = self.tasks.passes
        if tasks:
            self.session.fenced(lambda pipe: pipe.rpush(self.q.srq.key, *tasks))
            self.report.scheduled += pages

    def _merge_due(self) -> bool:
        """Whether the held results are to be merged now.

        Once every page is scheduled, they are merged as soon as they are as
        many as the pages still out with slaves: the merges that end the run
        halve in size, so the last one, which no slave work overlaps, is small.
        """
        if self.held.docs >= self.merge_docs or not self.tasks.outstanding:
            return True
        if self.tasks.scanned_all and self.held.docs >= self.tasks.pages_out:
            return True
        return time.monotonic() - self.held.since >= self.merge_wait

    # -- the merge: Tantivy, then the store, then Redis, all fenced ----------------
    def _merge(self) -> None:
        """Write the held documents (``HeldResults.write``), then acknowledge their results;
        the lease is checked before the commit and again by the acknowledgement."""
        self.held.write(self.writer, self.store, self.lease.keep, self.freshness)
        # after the commit: a crash before this line replays the results
        self._ack_merged(keys=[self.q.nrq.processing_key(self.id)], args=[len(self.held.raw)])
        self.held.clear()

    def _published(self, commit: Commit) -> None:
        """A commit is published: what ``srcrawl status`` shows beside the replicas'."""
        self.client.hset(
            self.keys.index_published,
            mapping={
                "commit": commit.opstamp,
                "published_at": commit.published_at,
                "files": len(commit.files),
                "bytes": commit.bytes,
            },
        )

    def _stats(self) -> dict[str, float]:
        stats: dict[str, float] = {
            "indexed": self.report.indexed,
            "outstanding": len(self.tasks.outstanding),
            "merge_s": round(self.report.merge_s, 3),
        }
        if self.follow:
            fresh = self.freshness.summary()
            names = ("fresh_pages", "delay_p50_s", "delay_p95_s")
            stats.update({name: fresh[name] for name in names if fresh[name] is not None})
        return stats
