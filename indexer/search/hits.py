"""Hits as shown: the collected pages read from the store, each with its snippet.

Only the shown page of results gets here (a pool is hundreds of pages, a page
of results ten), so the store is read for those alone, in one query, and the
pages folded into them in one more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from srcrawl.core.defaults import DEFAULT_SNIPPET_CHARS, SIMILAR_URLS
from srcrawl.core.urls import host_of
from srcrawl.indexer.boilerplate import HostBoilerplate
from srcrawl.indexer.search.collect import Scored
from srcrawl.indexer.search.snippets import Snippet, make_snippet, snippet_terms
from srcrawl.sql.store import Store


@dataclass
class Hit:
    """One result as shown: a page, its blended score and snippet, its duplicates."""

    url: str
    title: str
    score: float
    snippet: Snippet
    fp: int
    similar: int = 0  # duplicates and near-duplicates collapsed into this hit
    similar_urls: list[str] = field(default_factory=list)  # theirs (at most SIMILAR_URLS)

    def as_json(self) -> dict:
        return {
            "url": self.url,
            "title": self.title,
            "score": round(self.score, 6),
            "snippet": self.snippet.marked(),  # « »: the plain text the API has always had
            "similar": self.similar,
            "similar_urls": self.similar_urls,
        }


class HitReader:
    """Reads collected pages into hits: URL, title, snippet, the URLs of their duplicates.

    Snippets come from the page's own text (the host's repeated text, menus and
    footers, taken out as the index did: ``boilerplate``) with its original punctuation.
    """

    def __init__(
        self,
        store: Store,
        boilerplate: HostBoilerplate | None = None,
        snippet_chars: int = DEFAULT_SNIPPET_CHARS,
    ) -> None:
        self.store = store
        self.boilerplate = boilerplate or HostBoilerplate(store)
        self.snippet_chars = snippet_chars

    def hits(self, found: list[Scored], terms: list[str]) -> list[Hit]:
        """The hits of ``found``, in order, their snippets around ``terms`` (a page the
        store no longer holds is left out)."""
        pages = {row[0]: row for row in self.store.index_documents([s.fp for s in found])}
        similar = self._similar_urls(found)
        hits = []
        for s in found:
            if s.fp in pages:
                _fp, _at, url, title, text = pages[s.fp]
                own = self.boilerplate.own_text(host_of(url))  # menus are no snippet
                snippet = make_snippet(text, snippet_terms(text, terms), self.snippet_chars, own)
                folded = [similar[m] for m in s.members[:SIMILAR_URLS] if m in similar]
                hits.append(Hit(url, title, s.score, snippet, s.fp, s.similar, folded))
        return hits

    def _similar_urls(self, found: list[Scored]) -> dict[int, str]:
        """The URLs of the pages folded into the hits (the first SIMILAR_URLS of each)."""
        fps = [m for s in found for m in s.members[:SIMILAR_URLS]]
        return {p.fp: p.url for p in self.store.get_pages(fps)} if fps else {}
