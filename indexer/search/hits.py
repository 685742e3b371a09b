"""Hits as shown: the collected pages read from the store, each with its snippet.

Only the shown page of results gets here (a pool is hundreds of pages, a page
of results ten), so the store is read for those alone, in one query, and the
pages folded into them in one more. A snippet is cut from the page's own text
the index stores with its document (indexer/engine.py's ``text``): no WARC
file is read and no boilerplate is looked for. An index built before that field
had none: its hits' texts are read from the store and their host's boilerplate
passed over, as then, until it is rebuilt (``srcrawl index --rebuild``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tantivy

from srcrawl.core.defaults import DEFAULT_SNIPPET_CHARS, SIMILAR_URLS
from srcrawl.core.urls import host_of
from srcrawl.indexer.boilerplate import HostBoilerplate
from srcrawl.indexer.engine import STORED_FOLDED, STORED_TEXT
from srcrawl.indexer.search.collect import Scored
from srcrawl.indexer.search.snippets import (
    Snippet,
    make_snippet,
    snippet_terms,
    stored_snippet,
)
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
    footers, taken out as the index did) with its original punctuation.
    """

    def __init__(
        self,
        store: Store,
        boilerplate: HostBoilerplate | None = None,
        snippet_chars: int = DEFAULT_SNIPPET_CHARS,
    ) -> None:
        self.store = store
        self._boilerplate = boilerplate
        self.snippet_chars = snippet_chars

    @property
    def boilerplate(self) -> HostBoilerplate:
        """The hosts' boilerplate, for an index without stored texts (made when needed)."""
        if self._boilerplate is None:
            self._boilerplate = HostBoilerplate(self.store)
        return self._boilerplate

    def hits(
        self, found: list[Scored], terms: list[str], searcher: tantivy.Searcher | None = None
    ) -> list[Hit]:
        """The hits of ``found``, in order, their snippets around ``terms`` (a page the
        store no longer holds is left out); their texts from ``searcher``'s documents
        when it has them."""
        texts = _stored_texts(searcher, found) if searcher is not None else {}
        pages = {fp: (url, title) for fp, url, title in self.store.hit_pages([s.fp for s in found])}
        unstored = [s.fp for s in found if s.fp in pages and s.fp not in texts]
        old = {r[0]: r[4] for r in self.store.index_documents(unstored)} if unstored else {}
        similar = self._similar_urls(found)
        hits = []
        for s in found:
            if s.fp not in pages:
                continue
            url, title = pages[s.fp]
            if s.fp in texts:
                snippet = stored_snippet(*texts[s.fp], terms, self.snippet_chars)
            elif s.fp in old:  # an index without stored texts
                text = old[s.fp]
                own = self.boilerplate.own_text(host_of(url))  # menus are no snippet
                snippet = make_snippet(text, snippet_terms(text, terms), self.snippet_chars, own)
            else:  # the store lost the page between the two reads
                continue
            folded = [similar[m] for m in s.members[:SIMILAR_URLS] if m in similar]
            hits.append(Hit(url, title, s.score, snippet, s.fp, s.similar, folded))
        return hits

    def _similar_urls(self, found: list[Scored]) -> dict[int, str]:
        """The URLs of the pages folded into the hits (the first SIMILAR_URLS of each)."""
        fps = [m for s in found for m in s.members[:SIMILAR_URLS]]
        return {p.fp: p.url for p in self.store.get_pages(fps)} if fps else {}


def _stored_texts(
    searcher: tantivy.Searcher, found: list[Scored]
) -> dict[int, tuple[bytes, bytes | None]]:
    """fp -> the own text the index stores for each of ``found``, UTF-8, and that text
    folded in place when the index keeps a folded copy (none in an index built before
    the field)."""
    texts = {}
    for s in found:
        if s.address is not None:
            doc = s.doc if s.doc is not None else searcher.doc(s.address)
            stored = doc.get_first(STORED_TEXT)
            if stored is not None:
                folded = doc.get_first(STORED_FOLDED)
                texts[s.fp] = (bytes(stored), bytes(folded) if folded is not None else None)
    return texts
