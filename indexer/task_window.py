"""The index tasks out with slaves: a window of batches of page ids, scheduled from the
store's unindexed pages (a rebuild's: every indexable page) in fingerprint order, one pass
over them at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from srcrawl.indexer.protocol import IndexTask
from srcrawl.queues.tags import TagCounter

if TYPE_CHECKING:
    from srcrawl.sql.store import Store


class TaskWindow:
    """At most ``size`` tasks of ``batch_pages`` pages each out at a time, each with a
    serial from ``trq`` its results name. ``pages`` (after, limit): the pages to schedule
    in fingerprint order (default: the store's unindexed ones)."""

    def __init__(
        self,
        store: Store,
        trq: TagCounter,
        size: int,
        batch_pages: int,
        dictionary: str,
        pages: Callable[[int | None, int], list[int]] | None = None,
    ) -> None:
        self.store, self.trq = store, trq
        self.pages = pages if pages is not None else store.unindexed_pages
        self.size, self.batch_pages, self.dictionary = size, batch_pages, dictionary
        self.outstanding: dict[int, int] = {}  # batch serial -> pages
        self.cursor: int | None = None  # the last fingerprint scheduled in this pass
        self.scanned_all = False  # every unindexed page of this pass is scheduled
        self.passes = 0  # passes begun

    def top_up(self) -> tuple[list[bytes], int]:
        """The tasks that fill the window (none once every unindexed page is scheduled),
        and their pages; noted as out before they are queued."""
        free = self.size - len(self.outstanding)
        if free <= 0 or self.scanned_all:
            return [], 0
        if self.cursor is None:
            self.passes += 1
        fps = self.pages(self.cursor, free * self.batch_pages)
        if len(fps) < free * self.batch_pages:
            self.scanned_all = True
        if not fps:
            return [], 0
        self.cursor = fps[-1]
        chunks = [fps[i : i + self.batch_pages] for i in range(0, len(fps), self.batch_pages)]
        tasks = []
        for serial, chunk in zip(self.trq.reserve("batch", len(chunks)), chunks, strict=True):
            self.outstanding[serial] = len(chunk)
            tasks.append(IndexTask(serial, chunk, self.dictionary).encode())
        return tasks, len(fps)

    def new_pass(self) -> None:
        """Scan again from the first fingerprint: pages stored (again) since the last pass."""
        self.cursor, self.scanned_all = None, False

    @property
    def pages_out(self) -> int:
        return sum(self.outstanding.values())
