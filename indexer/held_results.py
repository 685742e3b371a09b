"""The slaves' results an index master holds between two merges, and their write.

The master pops results from nrq into its own processing list and holds them here:
the raw messages (acknowledged by count once merged: they are the head of that
list) and the documents they carry. A merge writes the documents in one Tantivy
commit and marks their pages indexed; the master acknowledges the results after
that, so a crash in between replays them, which changes nothing (indexer/master.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from srcrawl.core.errors import EnvelopeError
from srcrawl.indexer.documents import unpack
from srcrawl.indexer.engine import IndexDoc, IndexWriter
from srcrawl.indexer.freshness import Freshness
from srcrawl.indexer.protocol import (
    DOCUMENTS,
    ERROR,
    REFUSED,
    DocumentsResult,
    Refusal,
    failed_tasks,
)
from srcrawl.indexer.report import IndexReport
from srcrawl.queues.envelope import Message, decode

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

log = logging.getLogger("srcrawl.indexer")


class HeldResults:
    """Results popped and not yet merged; ``outstanding`` (batch serial → pages) is the
    master's record of the tasks out with slaves, from which answered ones are taken.
    ``mark`` (versions, when): how written pages are marked (default: in the store at once;
    a rebuild keeps them until its index replaces the old one)."""

    def __init__(
        self,
        report: IndexReport,
        outstanding: dict[int, int],
        mark: Callable[[list[tuple[int, float]], float], object] | None = None,
    ) -> None:
        self.report, self.outstanding = report, outstanding
        self.mark = mark
        self.raw: list[bytes] = []  # popped, not yet merged nor acknowledged
        self.batches: list[list[IndexDoc]] = []  # their documents
        self.docs = 0
        self.since = 0.0  # monotonic time the first of them was popped
        self._handlers: dict[str, Callable[[Message], None]] = {
            DOCUMENTS: self._on_documents,
            REFUSED: self._on_refused,
            ERROR: self._on_error,
        }

    def take(self, messages: list[bytes]) -> None:
        """Hold popped results until the next merge; note which tasks are answered."""
        if not messages:
            return
        if not self.raw:
            self.since = time.monotonic()
        self.raw.extend(messages)
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

    def write(
        self, writer: IndexWriter, store: Store, keep: Callable[[], None], freshness: Freshness
    ) -> None:
        """Write the held documents in one Tantivy commit and mark their pages indexed.

        ``keep`` checks the lease right before the commit (a master that lost it rolls
        back and raises LeaseLost). A master paused between that check and its commit
        may commit once late; that cannot corrupt the index: Tantivy's writer lock lets
        one master write at a time, and a document replaces its page's last (by
        fingerprint), so the late commit is one more write of the same pages' same
        text. A page is marked indexed only if it was not fetched again since
        (``Store.mark_indexed``).
        """
        if not self.docs:
            return
        t0 = time.perf_counter()
        latest: dict[int, IndexDoc] = {}
        for docs in self.batches:
            latest.update((d.fp, d) for d in docs)  # of a page listed twice, the last
        current = store.fetched_at(list(latest))
        kept = [d for d in latest.values() if current.get(d.fp) == d.fetched_at]
        self.report.stale += len(latest) - len(kept)
        if kept:
            writer.replace(kept)
            writer.commit(before=keep)
            now = time.time()
            (self.mark or store.mark_indexed)([(d.fp, d.fetched_at) for d in kept], now)
            freshness.add([d.fetched_at for d in kept], now)  # searchable now
            self.report.merges += 1
            self.report.indexed += len(kept)
        self.report.merge_s += time.perf_counter() - t0

    def clear(self) -> None:
        """Forget the results: merged and acknowledged."""
        self.raw, self.batches, self.docs = [], [], 0

    # -- one handler per kind -----------------------------------------------------------
    def _on_documents(self, msg: Message) -> None:
        try:
            result = DocumentsResult.from_message(msg)
            docs = unpack(result.payload)
        except EnvelopeError as e:
            self._fail_batch(msg.get("batch"), f"dropped malformed documents: {e}")
            return
        self.batches.append(docs)
        self.docs += len(docs)
        self.report.missing += result.missing
        self.outstanding.pop(result.batch, None)

    def _on_refused(self, msg: Message) -> None:
        refusal = Refusal.from_message(msg)
        self._fail_batch(refusal.batch, f"a slave refused a task: {refusal.reason}")

    def _on_error(self, msg: Message) -> None:
        """A slave's handler failed on a batch (a bug): its pages stay unindexed."""
        first = str(msg.get("error", "")).strip().splitlines()
        reason = first[-1] if first else "unknown error"
        for task in failed_tasks(msg):
            self._fail_batch(task.batch, f"a slave failed on a task: {reason}")

    def _fail_batch(self, batch: object, reason: str) -> None:
        pages = self.outstanding.pop(batch, 0) if isinstance(batch, int) else 0
        self.report.failed += pages
        self._error(reason)

    def _error(self, reason: str) -> None:
        log.warning("%s", reason)
        self.report.error(reason)
