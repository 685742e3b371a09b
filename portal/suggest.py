"""``/api/suggest``: completions of what is typed in the search box (portal/static/suggest.js).

A keystroke is answered from :class:`~srcrawl.indexer.search.completion.Completions`,
sorted lists bisected in the event loop (no thread hand-off: microseconds of work),
never from the index. They are built from the store's titles and the index's term
counts once per commit of the index the portal sees: the first request waits for
the first build (in a thread, the event loop serving meanwhile); after a new commit
the lists are rebuilt in a thread, at most every REBUILD_EVERY_S while an index is
being written (a build reads up to MAX_TITLES titles), and the old ones answer
until then.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Query
from fastapi.responses import Response

from srcrawl.indexer.engine import IndexUnavailable
from srcrawl.indexer.search.completion import MAX_PREFIX_CHARS, Completions, build
from srcrawl.portal.hot import JSON_TYPE
from srcrawl.portal.schemas import SuggestOut
from srcrawl.portal.search_pool import SearchPool
from srcrawl.sql.store import open_store

if TYPE_CHECKING:
    from srcrawl.portal.app import Portal

log = logging.getLogger(__name__)

MAX_TITLES = 50_000
"""Titles a build reads (a sample of a larger crawl: the words of titles repeat)."""
REBUILD_EVERY_S = 60.0
"""Least time between builds while the index gets new commits."""


class Suggester:
    """The completions of the commit the search pool's index reader sees."""

    def __init__(self, pool: SearchPool, rebuild_every: float = REBUILD_EVERY_S) -> None:
        self.pool = pool
        self.rebuild_every = rebuild_every
        self._completions: Completions | None = None
        self._memo: object = None  # the reader's memo of the commit built from
        self._tried_at: float | None = None  # the last build's start, done or failed
        self._building = threading.Lock()

    async def suggest(self, typed: str) -> list[str]:
        """Up to 8 completions of ``typed`` (cut at 64 characters); none when there is no
        index yet."""
        typed = typed[:MAX_PREFIX_CHARS]
        if not typed.strip():
            return []
        try:
            _searcher, memo = self.pool.reader.snapshot()
        except IndexUnavailable:
            return []
        completions = self._completions
        if completions is None:
            if not self._due():
                return []  # the last build failed a moment ago: not one a keystroke
            completions = await asyncio.to_thread(self._build_once)
        elif memo is not self._memo and self._due() and not self._building.locked():
            threading.Thread(target=self._rebuild, name="suggest-build", daemon=True).start()
        return completions.complete(typed) if completions is not None else []

    def _due(self) -> bool:
        """Whether a build may start now: none tried yet, or the last one long enough ago."""
        return self._tried_at is None or time.monotonic() - self._tried_at >= self.rebuild_every

    def _build_once(self) -> Completions | None:
        with self._building:  # concurrent first requests wait for one build
            if self._completions is None and self._due():
                self._build()
            return self._completions

    def _rebuild(self) -> None:
        if self._building.acquire(blocking=False):
            try:
                self._build()
            finally:
                self._building.release()

    def _build(self) -> None:
        t0 = time.perf_counter()
        self._tried_at = time.monotonic()
        try:
            searcher, memo = self.pool.reader.snapshot()
            store = open_store(self.pool.db, self.pool.warc_root)
            try:
                titles = store.some_titles(MAX_TITLES)
            finally:
                store.close()
            completions = build(searcher, titles, self.pool.tokenizer)
        except Exception:  # the store or index unreadable now: the last lists go on answering
            log.exception("the search box's completions could not be built")
            return
        self._completions, self._memo = completions, memo
        log.info(
            "search box completions: %d words and titles in %.2f s",
            len(completions),
            time.perf_counter() - t0,
        )


def suggest_routes(app: FastAPI, portal: Portal) -> None:
    suggester = Suggester(portal.pool)

    @app.get("/api/suggest", response_model=SuggestOut)
    async def api_suggest(
        q: str = Query("", description="What is typed so far (its first 64 characters)"),
    ) -> Any:
        """Completions of a query being typed: its last word completed from the words of
        the pages' titles (and frequent Chinese terms), ranked by the pages holding them,
        and titles that start as the query does. Anything unusable gets an empty list."""
        found = await suggester.suggest(q)
        body = orjson.dumps({"q": q[:MAX_PREFIX_CHARS], "suggestions": found})
        return Response(body, media_type=JSON_TYPE)
