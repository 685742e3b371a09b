"""Group commit of fetched pages: many fetch threads, one store transaction.

Each fetch thread hands its page and links to the writer and waits until the
transaction holding them has committed; only then does the slave ack the
task. So a page is acknowledged only once it is stored, yet the store sees
one transaction per batch, not per page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future

from srcrawl.errors import StoreError
from srcrawl.sql.store import Page, Store

log = logging.getLogger("srcrawl.slave")

_RETRIES = 5


class PageWriter:
    """Collects pages for up to ``max_wait`` seconds or ``max_pages``, then commits them."""

    def __init__(self, store: Store, *, max_pages: int = 200, max_wait: float = 0.05) -> None:
        self.store = store
        self.max_pages = max_pages
        self.max_wait = max_wait
        self._items: list[tuple[Sequence[Page], Sequence[tuple[int, int]], Future]] = []
        self._cond = threading.Condition()
        self._closed = False
        self.commits = 0
        self._thread = threading.Thread(target=self._run, name="page-writer", daemon=True)
        self._thread.start()

    def save(self, pages: Sequence[Page], links: Sequence[tuple[int, int]]) -> None:
        """Store ``pages`` and ``links``; return once they are committed (or raise StoreError)."""
        done: Future = Future()
        with self._cond:
            if self._closed:
                raise StoreError("page writer is closed")
            self._items.append((pages, links, done))
            self._cond.notify()
        done.result()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._items and not self._closed:
                    self._cond.wait()
                if self._closed and not self._items:
                    return
                # let a batch gather unless it is already full
                deadline = time.monotonic() + self.max_wait
                while len(self._items) < self.max_pages and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                items, self._items = self._items, []
            self._commit(items)

    def _commit(self, items: list) -> None:
        pages = [p for ps, _, _ in items for p in ps]
        links = [link for _, ls, _ in items for link in ls]
        error: Exception | None = None
        for attempt in range(_RETRIES):
            try:
                self.store.save_fetched(pages, links)
                self.commits += 1
                error = None
                break
            except StoreError as e:  # a busy or restarting database: wait and try again
                error = e
                log.warning("store write failed (attempt %d): %s", attempt + 1, e)
                time.sleep(min(2**attempt * 0.2, 5.0))
        for _, _, done in items:
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)
