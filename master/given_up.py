"""Rows for the URLs a crawl ended without a request: each ends in the store as a page
with no response, its reason in ``error``, so `srcrawl export pages` lists every URL
scheduled.

A URL whose fetch failed is stored by its slave (the fetch's error). A URL given up
because its host's robots.txt never answered (``robots_gave_up``) and one whose slave's
handler failed on its task (``slave_error``) never reached a fetch, so the master writes
their rows. (A URL its robots.txt disallows is the site's wish, not a failure: counted
as ``robots_disallowed``, never requested, no row.)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from srcrawl.core.urls import host_of
from srcrawl.queues.crawl_protocol import FetchTask
from srcrawl.sql.pages import Page

if TYPE_CHECKING:
    from srcrawl.sql.store import Store


def given_up_row(task: FetchTask, at: float, reason: str) -> Page:
    """The row of ``task``'s URL, ended at ``at`` for ``reason``: no response, the reason
    its error."""
    return Page(
        fp=task.fp,
        url=task.url,
        host=host_of(task.url),
        depth=task.depth,
        fetched_at=at,
        error=reason,
        body_state="none",
    )


def store_given_up(store: Store, tasks: Sequence[tuple[FetchTask, str]]) -> int:
    """Write the rows of ``tasks`` (each with its reason) whose URL has none yet (a page
    fetched before keeps its row: a recrawl given up is no failure of the URL's). Returns
    the rows written.

    Idempotent: a batch replayed by the next master writes the same rows again.
    """
    if not tasks:
        return 0
    stored = {p.fp for p in store.get_pages([t.fp for t, _reason in tasks])}
    now = time.time()
    rows = [given_up_row(t, now, reason) for t, reason in tasks if t.fp not in stored]
    return store.put_pages(rows) if rows else 0
