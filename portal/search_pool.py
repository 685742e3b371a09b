"""Searches run in a pool of threads, each with its own store connection (or, with no
threads, in the event loop: portal/server.py's default_threads says when).

The tokenizer (jieba's dictionary, the user dictionary) is loaded once, at
start-up, and shared; so is the index reader (Tantivy's searchers are shared
between threads and follow the index master's commits) and the hosts'
boilerplate (snippets). With an index in an object store, the replica the reader reads
is kept on the published commits here too (indexer/replica.py). What the store holds
(the hits' pages, ranks) is read through one connection per thread, so one slow
search never holds the others' connection. SQLite reads in WAL mode never wait for one
another or for a writer.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from srcrawl.core.urls import host_of
from srcrawl.indexer.engine import IndexReader
from srcrawl.indexer.replica import IndexReplica
from srcrawl.indexer.search import Searcher, SearchResult, meaning
from srcrawl.indexer.search.hits import Hit
from srcrawl.indexer.tokenizer import Tokenizer, get_tokenizer
from srcrawl.portal.grouping import GROUP_DEPTH, HostGroups, fold_near_identical
from srcrawl.portal.markup import stored_link
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import Store, open_store
from srcrawl.warc.storage import WarcStorage

MAX_QUERY_CHARS = 256
"""The characters of a query searched: the rest is left out, and the answer says so (no one
types more into a search box; a pasted text is searched by its start)."""
MAX_PAGE_SIZE = 50
MAX_RESULT_DEPTH = 500
"""Results reachable by paging (page × size): deeper pages are refused."""
T = TypeVar("T")
WARM_UP_TEXT = "分布式搜索引擎 search engine"  # one CJK string loads jieba's dictionary now


class PastLastPage(ValueError):
    """A page of results beyond the last one; ``last`` is the last (1 when none)."""

    def __init__(self, page: int, last: int, deep: bool) -> None:
        why = f" (only the first {MAX_RESULT_DEPTH} results can be paged through)" if deep else ""
        super().__init__(f"page {page} is past the last page of results, {last}{why}")
        self.page, self.last = page, last


@dataclass
class ResultPage:
    """One page of a search's results, and what the search found in all."""

    result: SearchResult
    page: int
    size: int
    host_more: dict[int, int] = field(default_factory=dict)
    """fp of a hit -> pages of its host passed over on the first page (portal/grouping.py)."""

    @property
    def hits(self) -> list:
        return self.result.hits  # searched with this page's offset: only its hits

    @property
    def pages(self) -> int:
        """How many pages of results can be reached."""
        reachable = min(self.result.matches, MAX_RESULT_DEPTH)
        counted = max(1, -(-reachable // self.size))
        # a later page may list pages with some of the words that page 1 did not count
        return max(counted, self.page) if self.result.hits else counted

    def as_json(self) -> dict:
        r = self.result
        return {
            "query": r.query,
            "terms": r.terms,
            "mode": r.mode,
            "matches": r.matches,
            "every": r.every,
            "missing": r.missing,
            "suggestion": r.suggestion,
            "ranked": r.ranked,
            "page": self.page,
            "size": self.size,
            "pages": self.pages,
            "elapsed_ms": round(r.elapsed_ms, 3),
            "notes": r.notes,
            "facets": r.facets.as_json() if r.facets is not None else None,
            "hits": [self._hit_json(h) for h in self.hits],
        }

    def _hit_json(self, hit: Hit) -> dict:
        out = hit.as_json()
        out["host"] = host_of(hit.url)
        out["host_more"] = self.host_more.get(hit.fp, 0)
        out["stored"] = stored_link(hit.url)
        return out


class SearchPool:
    """``threads`` searchers over one database, shared by every request (0: one, in the
    event loop's thread)."""

    def __init__(
        self,
        db: DatabaseURL,
        index: Path,
        *,
        threads: int = 4,
        user_dict: str | None = None,
        on_search: Callable[[float], None] | None = None,
        warc_root: Path | WarcStorage | None = None,
        replica: IndexReplica | None = None,
    ) -> None:
        self.db = db
        self.threads = threads
        self.reader = IndexReader(index)
        self.replica = replica
        """With an index in an object store, the replica ``index`` is: it follows the
        published commits in a thread, and each one it installs is searched at once."""
        if replica is not None:
            replica.on_commit = self.reader.reload
            replica.start()
        self.warc_root = warc_root
        """Where the page texts of a crawl with ``--body-store warc`` are (the snippets')."""
        self.tokenizer: Tokenizer = get_tokenizer(user_dict)
        self.tokenizer.warm_up()  # the dictionary load is start-up, not query time
        self.tokenizer.tokens(WARM_UP_TEXT)  # and so is jieba's first cut
        meaning.available()  # and so is the embedding model's (what a query means)
        self._local = threading.local()
        self._stores: list[Store] = []
        self._lock = threading.Lock()
        self.on_search = on_search
        # no threads: each search runs in the event loop, sparing the hand-off to a thread
        # and back (10-20 % of a request's CPU) at the cost of the loop's other requests
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="search") if threads else None

    def _searcher(self) -> Searcher:
        searcher = getattr(self._local, "searcher", None)
        if searcher is None:
            store = open_store(self.db, self.warc_root)
            with self._lock:
                self._stores.append(store)
            searcher = self._local.searcher = Searcher(store, self.reader, tokenizer=self.tokenizer)
        return searcher

    def search(self, query: str, page: int = 1, size: int = 10) -> ResultPage:
        """One page of results for ``query`` (in the calling thread), the query cut at
        MAX_QUERY_CHARS (and a note saying so).

        Raises PastLastPage for a page beyond the last, and QueryError for an unusable query.
        """
        cut = len(query) > MAX_QUERY_CHARS
        query = query[:MAX_QUERY_CHARS]
        if page * size > MAX_RESULT_DEPTH:
            # too deep to search: the deepest page that may be reached says where the
            # results end (the search a request for that page costs, no more)
            deepest = max(1, MAX_RESULT_DEPTH // size)
            try:
                self.search(query, deepest, size)
            except PastLastPage as e:
                raise PastLastPage(page, e.last, False) from None
            raise PastLastPage(page, deepest, True)
        t0 = time.perf_counter()
        searcher = self._searcher()
        groups = HostGroups(searcher.store, size, page * size)
        # the first page is chosen from GROUP_DEPTH pages' worth of ranked pages
        top = max(page * size, size * GROUP_DEPTH)
        try:
            result = searcher.search(
                query, top=top, offset=(page - 1) * size, arrange=groups, facets=True
            )
            result.hits = fold_near_identical(result.hits, groups.host_more)
        finally:
            if self.on_search is not None:
                self.on_search(time.perf_counter() - t0)
        if cut:
            result.notes.insert(0, f"only the first {MAX_QUERY_CHARS} characters were searched")
        found = ResultPage(result, page, size, groups.host_more)
        if page > found.pages:
            raise PastLastPage(page, found.pages, False)
        return found

    async def search_async(self, query: str, page: int = 1, size: int = 10) -> ResultPage:
        """:meth:`search` in the pool, so the event loop goes on serving meanwhile (without
        threads, in the event loop itself)."""
        if self._pool is None:
            return self.search(query, page, size)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.search, query, page, size)

    async def call_async(self, work: Callable[[Searcher], T]) -> T:
        """``work(searcher)`` where a search would run (a thread's searcher and store)."""
        if self._pool is None:
            return work(self._searcher())
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: work(self._searcher()))

    def close(self) -> None:
        if self.replica is not None:
            self.replica.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        with self._lock:
            for store in self._stores:
                store.close()
            self._stores.clear()
