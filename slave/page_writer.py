"""Group commit of fetched pages: many fetch threads, one store transaction.

Fetch threads add their page and links and go on to their next task; the
slave's acker calls :meth:`PageWriter.flush` before it acknowledges the
tasks that finished meanwhile, so one transaction stores every page of
the batch it is about to acknowledge. A page is acknowledged only once it
is stored, yet the store sees one transaction per batch, not per page, and
no fetch thread waits for the store (nor switches to a writer thread and
back, which cost more CPU than the insert itself).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from srcrawl.errors import StoreError
from srcrawl.sql.store import Page, Store

log = logging.getLogger("srcrawl.slave")

_RETRIES = 5


class PageWriter:
    """Pages and links added by any thread, stored by :meth:`flush` in one transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pages: list[Page] = []
        self._links: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()

    def add(self, pages: Sequence[Page], links: Sequence[tuple[int, int]]) -> None:
        """Queue ``pages`` and ``links`` for the next :meth:`flush`."""
        with self._lock:
            self._pages.extend(pages)
            self._links.extend(links)

    def flush(self) -> int:
        """Store everything added so far in one transaction; return the page count.

        A busy or restarting database is retried a few times; then the
        StoreError is raised and the pages wait for the next flush (the
        runtime acknowledges none of their tasks until one succeeds).
        """
        with self._flush_lock:
            with self._lock:
                pages, self._pages = self._pages, []
                links, self._links = self._links, []
            if not pages and not links:
                return 0
            for attempt in range(_RETRIES):
                try:
                    self.store.save_fetched(pages, links)
                    return len(pages)
                except Exception as e:
                    log.warning("store write failed (attempt %d): %s", attempt + 1, e)
                    if attempt == _RETRIES - 1 or not isinstance(e, StoreError):
                        with self._lock:
                            self._pages[:0] = pages
                            self._links[:0] = links
                        raise
                    time.sleep(min(2**attempt * 0.2, 5.0))
            return 0  # not reached
