"""Rows for the URLs a crawl gave up without a request: each ends in the store as a failed
page, its reason in ``error``, so `srcrawl export pages` lists every URL scheduled.

A URL whose fetch failed is stored by its slave (the fetch's error); a URL given up
because its host's robots.txt never answered never reached a slave's fetch, so the
master writes its row.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from srcrawl.core.urls import host_of
from srcrawl.queues.crawl_protocol import ERROR_ROBOTS_GAVE_UP, FetchTask
from srcrawl.sql.pages import Page

if TYPE_CHECKING:
    from srcrawl.sql.store import Store


def given_up_row(task: FetchTask, at: float) -> Page:
    """The row of ``task``'s URL, given up at ``at``: no response, its reason the error."""
    return Page(
        fp=task.fp,
        url=task.url,
        host=host_of(task.url),
        depth=task.depth,
        fetched_at=at,
        error=ERROR_ROBOTS_GAVE_UP,
        body_state="none",
    )


def store_given_up(store: Store, tasks: Sequence[FetchTask]) -> int:
    """Write the rows of ``tasks`` whose URL has none yet (a page fetched before keeps its
    row: a recrawl given up is no failure of the URL's). Returns the rows written.

    Idempotent: a batch replayed by the next master writes the same rows again.
    """
    if not tasks:
        return 0
    stored = {p.fp for p in store.get_pages([t.fp for t in tasks])}
    now = time.time()
    rows = [given_up_row(t, now) for t in tasks if t.fp not in stored]
    return store.put_pages(rows) if rows else 0
