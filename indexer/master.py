"""The index master: schedules unindexed pages and merges postings [seed 002 §3.2].

It pages through the store's unindexed pages (``indexed_at IS NULL``: never
indexed, or fetched again since) and keeps a window of tasks, each a batch
of page ids with a serial from ``trq``, queued in ``srq``. Slaves answer in
``nrq`` with packed postings. The master is the only writer of the index: it
moves results into its processing list, lets them gather (up to
``DEFAULT_INDEX_MERGE_DOCS`` documents or ``DEFAULT_INDEX_MERGE_WAIT``
seconds, and at the end of a run no more than the pages still out with
slaves), merges them in one store transaction, and acknowledges them only
once that transaction committed. A master
killed between the two leaves the results to be merged again, which changes
nothing (a merge replaces a page's postings). While it waits it reaps dead
workers, whose unacknowledged tasks go back to ``srq``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from srcrawl.config import Config
from srcrawl.defaults import (
    DEFAULT_BLOCK_TIMEOUT,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_HEARTBEAT_TTL,
    DEFAULT_INDEX_BATCH_PAGES,
    DEFAULT_INDEX_MERGE_DOCS,
    DEFAULT_INDEX_MERGE_WAIT,
    DEFAULT_INDEX_REAP_INTERVAL,
    DEFAULT_INDEX_WINDOW,
)
from srcrawl.errors import EnvelopeError, SrcrawlError
from srcrawl.indexer.messages import POSTINGS, REFUSED, decode_task, encode_task
from srcrawl.indexer.postings import PostingsBatch, unpack_batch
from srcrawl.indexer.tokenizer import dictionary_id, user_dict_from_env
from srcrawl.local import LocalSlaves
from srcrawl.queues.envelope import Message, decode
from srcrawl.queues.protocol import PhaseQueues, new_worker_id
from srcrawl.queues.workers import Worker, reap, reaped_sentences, requeued

log = logging.getLogger("srcrawl.indexer")

# KEYS[1] the lock; ARGV[1] holder id, ARGV[2] TTL ms, ARGV[3] "renew" or "release".
# Renews or releases the lock only if ARGV[1] still holds it; returns 1 if so.
_LOCK = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[3] == 'release' then redis.call('DEL', KEYS[1]) else
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2])) end
return 1
"""


class IndexerError(SrcrawlError):
    """The index phase cannot go on (another master runs, every local slave died, …)."""


@dataclass
class IndexReport:
    """What one run of the index master did."""

    scheduled: int = 0  # pages sent to slaves
    indexed: int = 0  # documents merged into the index
    reindexed: int = 0  # of those, pages whose older postings were replaced
    stale: int = 0  # documents skipped: page fetched again (or deleted) meanwhile
    missing: int = 0  # page ids a slave found no page for
    failed: int = 0  # pages of tasks a slave refused or failed on (left unindexed)
    postings: int = 0
    rows: int = 0  # postings rows written (a row per distinct term of a merge)
    merges: int = 0
    merge_s: float = 0.0  # time inside merge transactions
    wall_s: float = 0.0
    requeued: int = 0  # tasks of dead workers returned to srq
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
        cfg: Config,
        *,
        batch_pages: int = DEFAULT_INDEX_BATCH_PAGES,
        window: int = DEFAULT_INDEX_WINDOW,
        merge_docs: int = DEFAULT_INDEX_MERGE_DOCS,
        merge_wait: float = DEFAULT_INDEX_MERGE_WAIT,
        user_dict: str | None = None,
        reap_interval: float = DEFAULT_INDEX_REAP_INTERVAL,
        heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL,
        block_timeout: float = DEFAULT_BLOCK_TIMEOUT,
    ) -> None:
        if batch_pages < 1 or window < 1 or merge_docs < 1:
            raise ValueError("batch_pages, window and merge_docs must be positive")
        self.cfg = cfg
        self.client = cfg.redis()
        self.store = cfg.store()
        self.keys = cfg.keys
        self.q = PhaseQueues(self.client, self.keys, "index")
        self.batch_pages = batch_pages
        self.window = window
        self.merge_docs = merge_docs
        self.merge_wait = merge_wait
        if user_dict is None:
            user_dict = user_dict_from_env()
        self.dictionary = dictionary_id(user_dict)
        self.reap_interval = reap_interval
        self.heartbeat_ttl = heartbeat_ttl
        self.block_timeout = block_timeout
        self.id = new_worker_id(self.client, self.keys, "index-master")
        self.worker = Worker(
            self.client, self.keys, self.id, [self.q.nrq], role="master", ttl=heartbeat_ttl
        )
        self._lock = self.client.register_script(_LOCK)
        self.report = IndexReport()
        self._outstanding: dict[int, int] = {}  # batch serial -> pages
        self._cursor: int | None = None
        self._scanned_all = False
        self._held: list[bytes] = []  # results popped, not yet merged nor acknowledged
        self._batches: list[PostingsBatch] = []  # their documents
        self._held_docs = 0
        self._held_since = 0.0

    # -- the lock: one index master per job --------------------------------
    def _acquire(self) -> None:
        ttl = int(self.heartbeat_ttl * 1000)
        if not self.client.set(self.keys.index_master, self.id, nx=True, px=ttl):
            holder = self.client.get(self.keys.index_master)
            raise IndexerError(
                f"another index master ({(holder or b'?').decode()}) is running for job "
                f"{self.keys.job!r}; it holds {self.keys.index_master}"
            )

    def _renew(self) -> None:
        ttl = int(self.heartbeat_ttl * 1000)
        if not self._lock(keys=[self.keys.index_master], args=[self.id, ttl, "renew"]):
            raise IndexerError("the index master lock was lost (this process stalled too long)")

    def _release(self) -> None:
        self._lock(keys=[self.keys.index_master], args=[self.id, 0, "release"])

    # -- the run -----------------------------------------------------------------
    def run(
        self,
        *,
        slaves: LocalSlaves | None = None,
        progress: Callable[[IndexReport], None] | None = None,
        progress_interval: float = 2.0,
    ) -> IndexReport:
        """Index every page unindexed when the scan reaches it; return what was done.

        With ``slaves`` (local slave processes), gives up with IndexerError
        once all of them have exited while work remains.
        """
        self._acquire()
        t0 = time.perf_counter()
        started = time.time()
        self.store.set_job(self.cfg.job, "index", "running", started_at=started)
        state = "failed"
        try:
            self.worker.beat(self._stats())
            # tasks a previous master left queued are scheduled again below
            self.q.srq.clear()
            last_beat = last_reap = last_progress = time.monotonic()
            while True:
                self._top_up()
                if self._scanned_all and not self._outstanding and not self._held:
                    break
                timeout = self.block_timeout
                if self._held:
                    waited = time.monotonic() - self._held_since
                    timeout = min(timeout, max(0.01, self.merge_wait - waited))
                want = max(1, (self.merge_docs - self._held_docs) // self.batch_pages)
                messages = self.q.nrq.pop(self.id, want, timeout=timeout)
                self._take(messages)
                if self._held and self._merge_due():
                    self._merge()
                if (
                    not messages
                    and self._outstanding
                    and slaves is not None
                    and slaves.alive() == 0
                ):
                    raise IndexerError(
                        f"every local index slave exited with {len(self._outstanding)} "
                        "task(s) left; see their logs"
                    )
                now = time.monotonic()
                if now - last_beat >= DEFAULT_HEARTBEAT_INTERVAL:
                    self._renew()
                    self.worker.beat(self._stats())
                    last_beat = now
                if now - last_reap >= self.reap_interval:
                    returned = reap(self.client, self.keys)
                    if returned:
                        self.report.requeued += requeued(returned)
                        for sentence in reaped_sentences(returned):
                            log.warning("%s", sentence)
                    last_reap = now
                if progress is not None and now - last_progress >= progress_interval:
                    self.report.wall_s = time.perf_counter() - t0
                    progress(self.report)
                    last_progress = now
            state = "complete"
        finally:
            self.report.wall_s = time.perf_counter() - t0
            # results popped but not merged go back to nrq for the next run
            self.worker.retire()
            self._release()
            self.store.set_job(
                self.cfg.job,
                "index",
                state,
                self.report.as_dict(),
                started_at=started,
                finished_at=time.time(),
            )
        return self.report

    def _top_up(self) -> None:
        """Queue tasks until the window is full or every unindexed page is scheduled."""
        free = self.window - len(self._outstanding)
        if free <= 0 or self._scanned_all:
            return
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
            tasks.append(encode_task(serial, chunk, self.dictionary))
        self.q.srq.push(tasks)
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
            if msg.kind == POSTINGS:
                try:
                    batch = unpack_batch(msg.payload)
                except EnvelopeError as e:
                    self._fail_batch(msg.get("batch"), f"dropped malformed postings: {e}")
                    continue
                self._batches.append(batch)
                self._held_docs += len(batch)
                self.report.missing += int(msg.get("missing", 0) or 0)
                self._outstanding.pop(msg.get("batch"), None)
            elif msg.kind == REFUSED:
                self._fail_batch(msg.get("batch"), f"a slave refused a task: {msg.get('reason')}")
            elif msg.kind == "error":
                self._absorb_error(msg)
            else:
                self._error(f"dropped a result of unknown kind {msg.kind!r}")

    def _merge(self) -> None:
        """Merge the held documents in one transaction, then acknowledge their results."""
        if self._held_docs:
            t0 = time.perf_counter()
            batch = PostingsBatch.concat(self._batches)
            merged = self.store.merge_index(batch, time.time())
            self.report.merge_s += time.perf_counter() - t0
            self.report.merges += 1
            self.report.indexed += merged.applied
            self.report.reindexed += merged.reindexed
            self.report.stale += merged.stale
            self.report.postings += merged.postings
            self.report.rows += merged.rows
        # after the commit: a crash before this line replays the results
        self.q.nrq.ack(self.id, self._held)
        self._held, self._batches, self._held_docs = [], [], 0

    def _absorb_error(self, msg: Message) -> None:
        """A slave's handler failed on a batch (a bug): its pages stay unindexed."""
        first = str(msg.get("error", "")).strip().splitlines()
        reason = first[-1] if first else "unknown error"
        for raw in msg.payload.split(b"\n"):
            try:
                task = decode_task(raw)
            except EnvelopeError:
                continue
            self._fail_batch(task.batch, f"a slave failed on a task: {reason}")

    def _fail_batch(self, batch: object, reason: str) -> None:
        pages = self._outstanding.pop(batch, 0) if isinstance(batch, int) else 0
        self.report.failed += pages
        self._error(reason)

    def _error(self, reason: str) -> None:
        log.warning("%s", reason)
        if len(self.report.errors) < 20 and reason not in self.report.errors:
            self.report.errors.append(reason)

    def _stats(self) -> dict[str, float]:
        return {
            "indexed": self.report.indexed,
            "outstanding": len(self._outstanding),
            "merge_s": round(self.report.merge_s, 3),
        }
