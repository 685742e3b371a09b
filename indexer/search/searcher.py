"""Ranked search: a query's two Tantivy queries, their hits collected, then read.

A query (indexer/search/query.py) is answered by two Tantivy queries: the
pages with every word, by BM25 over the fields (block-max WAND, exact top-k),
and, when the query has more than one word, the pages with some of the words
(a disjunction, where a page with more of them scores more), whose scores
count SOME_WORDS_SHARE of their worth. The two lists merge by score: a page
that lacks a word ranks above one with every word only when its words score
more than 1/SOME_WORDS_SHARE times (twice) as much (a section that names the
topic throughout but says "move" where the query says "migrate" passes a table
of contents that happens to hold every word once). The second query is left
out when no page lacking a word can reach the results.

Each tier's hits are collected (indexer/search/collect.py: the PageRank prior,
duplicates collapsed) from its best DEFAULT_RERANK_POOL (the second tier's, when
the first found pages, from four times the hits asked for: its pages are listed,
not counted); the pool is widened
until no page below it could rise into the results (a page below scores at most
the pool's lowest, so at most that times the prior's largest factor), so the
ranking stays exact. Only the hits shown are then read from the store, with
their snippets (indexer/search/hits.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import tantivy

from srcrawl.core.defaults import (
    DEFAULT_RERANK_POOL,
    DEFAULT_SEARCH_TOP,
    DEFAULT_SNIPPET_CHARS,
)
from srcrawl.indexer.boilerplate import HostBoilerplate
from srcrawl.indexer.engine import IndexReader, IndexUnavailable
from srcrawl.indexer.search import collect, meaning
from srcrawl.indexer.search import query as q
from srcrawl.indexer.search.collect import Prior, Scored
from srcrawl.indexer.search.facets import Facets
from srcrawl.indexer.search.facets import count as facet_counts
from srcrawl.indexer.search.hits import Hit, HitReader
from srcrawl.indexer.search.query import QueryError
from srcrawl.indexer.search.suggest import suggest
from srcrawl.indexer.search.weights import DEFAULT_WEIGHTS, TEXT_FIELDS, RankWeights
from srcrawl.indexer.tokenizer import Tokenizer, get_tokenizer, user_dict_from_env
from srcrawl.sql.store import Store

Query = tantivy.Query
Arrange = Callable[[list[Scored], q.Units], list[Scored]]
"""What may reorder or fold the ranked pages before a page of them is read (see search)."""


def as_is(found: list[Scored], _units: q.Units) -> list[Scored]:
    """The ranked pages as ranked (what ``Searcher.search`` lists by default)."""
    return found


MAX_POOL = 20_000
"""Hits a tier reads at most while widening its pool for the prior (a query asks for at
most a few hundred)."""


@dataclass
class SearchResult:
    """What a search found: its hits (one page of results) and how it went."""

    query: str
    terms: list[str]  # the tokens searched for
    mode: str  # "and" (every word), "or" (no page had every word: some), "none"
    # the pages with every word, counted up to the pool, and those with some listed among
    # the ``top`` (mode "or": the pages with some, counted up to the pool)
    matches: int
    ranked: bool  # PageRank was blended in
    hits: list[Hit]
    elapsed_ms: float
    notes: list[str] = field(default_factory=list)
    every: int = 0  # of the matches, the pages with every word
    missing: list[str] = field(default_factory=list)  # words no page holds (mode not "and")
    suggestion: str | None = None  # the query with those words spelt as the index has them
    # the matching pages counted by language, host and month (asked for, and the index
    # has those fields)
    facets: Facets | None = None


def _note_missing(mode: str, missing: list[str], notes: list[str]) -> None:
    """A note on the words no page holds (or that none holds every word)."""
    if mode == "none" and not missing:
        notes.append("no page holds these words")
    if missing:
        shown = ", ".join(f"«{w}»" for w in missing)
        notes.append(f"no page holds {shown}: check the spelling, or try another form")


class Searcher:
    """Answers queries from a job's index and store; cheap to keep across queries.

    ``index``: the index directory, or an :class:`IndexReader` to share; ``weights``: how
    much each signal of the ranking counts (indexer/search/weights.py); ``pool``: the hits
    a tier is collected from at first (and counted up to); ``fill_pool``: those of the
    pages with some of the words when pages with every word were found (0: four times
    the hits asked for). Either is widened as exactness needs.
    """

    def __init__(
        self,
        store: Store,
        index: IndexReader | Path | str,
        *,
        tokenizer: Tokenizer | None = None,
        weights: RankWeights = DEFAULT_WEIGHTS,
        snippet_chars: int = DEFAULT_SNIPPET_CHARS,
        pool: int = DEFAULT_RERANK_POOL,
        fill_pool: int = 0,
        boilerplate: HostBoilerplate | None = None,
    ) -> None:
        self.store = store
        self.reader = index if isinstance(index, IndexReader) else IndexReader(Path(index))
        self.tokenizer = tokenizer or get_tokenizer(user_dict_from_env())
        self.weights = weights
        self.pool = pool
        self.fill_pool = fill_pool
        self.hit_reader = HitReader(store, boilerplate, snippet_chars)
        # the suggestions for words no page holds, of the commit whose memo is _suggested_in
        self._suggested: dict[str, str | None] = {}
        self._suggested_in: object = None
        # the facets of the queries asked, of the commit whose memo is _counted_in
        self._counted: dict[str, Facets] = {}
        self._counted_in: object = None

    @property
    def rank_weight(self) -> float:
        """How much PageRank can raise a score."""
        return self.weights.rank

    def units(
        self, query: str, snapshot: Callable[[], tantivy.Searcher] | None = None
    ) -> tuple[q.Units, list[str]]:
        """The query's units and notes on what was left out (:func:`query.lower`); with
        ``snapshot`` (the index's searcher, taken at the first word that needs it), each
        word's fields weighed by its idf in the whole page as the weights ask
        (:func:`query.shared_idf`)."""
        scale = None
        if snapshot is not None and self.weights.shared_idf > 0:
            scale = q.shared_idf(snapshot, TEXT_FIELDS, self.weights.shared_idf)
        return q.lower(self.tokenizer, query, self._weights(), scale)

    def _weights(self) -> RankWeights:
        """The weights, without the words as written if the index lacks them (one built
        before them; with no index yet, the search says so later)."""
        if self.weights.exact <= 0:
            return self.weights
        try:
            if self.reader.has_exact:
                return self.weights
        except IndexUnavailable:
            return self.weights
        return replace(self.weights, exact=0.0)

    def search(
        self,
        query: str,
        top: int = DEFAULT_SEARCH_TOP,
        offset: int = 0,
        arrange: Arrange = as_is,
        *,
        facets: bool = False,
    ) -> SearchResult:
        """The ``top`` best pages for ``query``; raise QueryError if it is unusable.

        With ``offset`` (a later page of results), the hits are those ranked from
        ``offset + 1`` to ``top`` of the ranking, or of what ``arrange`` makes of it. With
        ``facets``, the matching pages are counted (indexer/search/facets.py).
        """
        t0 = time.perf_counter()
        # the pool a query's meaning reorders, when it counts
        by_meaning = self._meaning_counts(query)
        pool = max(top, meaning.MEANING_POOL) if by_meaning else top
        snapshot = _Snapshot(self._snapshot)
        units, notes = self.units(query, snapshot)
        searcher, memo = snapshot.taken()
        self._check_filters(searcher, units, notes)
        missing: list[str] = []
        with self.store.rank_snapshot() as ranks:
            prior = Prior(ranks, self.weights.rank, self.weights.hub)
            counted = q.every_word(units)
            found, matches = self._tier(searcher, counted, pool, prior)
            every = matches
            mode = "and" if found else "none"
            if units.positive > 1 and not collect.fill_cannot_rise(
                searcher, memo, units, found, pool, prior, self.weights.some_share(units.positive)
            ):
                found, matches, mode, counted = self._fill(
                    searcher, units, found, (matches, mode, counted), pool, prior, notes
                )
            if mode != "and":
                # only when something is lacking: which word no page holds at all (each
                # word's best score, kept in the commit's memo)
                missing = collect.unmatched(searcher, memo, units)
        _note_missing(mode, missing, notes)
        if by_meaning:
            found = meaning.fused(found, query, searcher, self.weights.meaning)
        found = found[:top]
        return SearchResult(
            query=query,
            terms=units.terms,
            mode=mode,
            matches=matches,
            ranked=prior.active,
            hits=self._hits(searcher, arrange(found, units)[offset:top], units.terms, notes),
            elapsed_ms=(time.perf_counter() - t0) * 1000,
            notes=notes,
            every=every,
            missing=missing,
            suggestion=self._suggestion(searcher, memo, query, missing) if missing else None,
            facets=self._facets(searcher, memo, counted, mode) if facets else None,
        )

    def _fill(
        self,
        searcher: tantivy.Searcher,
        units: q.Units,
        found: list[Scored],
        so_far: tuple[int, str, Query],
        top: int,
        prior: Prior,
        notes: list[str],
    ) -> tuple[list[Scored], int, str, Query]:
        """``found`` (the pages with every word) merged with the pages with some of them,
        and the matches, mode and query counted (``so_far``: those of ``found``)."""
        matches, mode, counted = so_far
        some_query = q.some_words(units)
        # pages with every word were found: this tier's pages are not counted, only the
        # best of them listed, so its pool need not be the one a count is read from
        pool = self.pool if mode == "none" else self.fill_pool
        more, some = self._tier(searcher, some_query, top, prior, pool)
        every_fps = {s.fp for s in found}
        found = collect.merge(found, more, top, self.weights.some_share(units.positive))
        # the list holds pages with some of the words too: they are counted, those listed
        # (the same whether or not this query ran: when it is left out, none of its pages
        # could be listed), so the count is never short of it
        matches += sum(1 for s in found if s.fp not in every_fps)
        if mode == "none" and more:  # every page listed has some: their count
            mode, matches, counted = "or", some, some_query
            notes.append("no page holds every word; pages holding some of them are shown")
        return found, matches, mode, counted

    def _meaning_counts(self, query: str) -> bool:
        """Whether the query's meaning reorders its best pages: weighed, in the model's
        language, and the index keeps its pages' vectors (one built before them does not)."""
        if self.weights.meaning <= 0 or not meaning.applies(query):
            return False
        try:
            return self.reader.has_meaning
        except IndexUnavailable:
            return False  # the search says so

    def _snapshot(self) -> tuple[tantivy.Searcher, dict[str, float]]:
        """The index's searcher and its commit's memo; QueryError if there is none."""
        try:
            searcher, memo = self.reader.snapshot()
        except IndexUnavailable as e:
            raise QueryError(str(e)) from e
        if searcher.num_docs == 0:
            raise QueryError("the index is empty: run `srcrawl index` first")
        return searcher, memo

    def _check_filters(self, searcher: tantivy.Searcher, units: q.Units, notes: list[str]) -> None:
        """Raise FilterError for a filter the index cannot answer (one built before its
        fields); a note for a language no page is in."""
        if units.facet_filters and not self.reader.has_facets:
            raise q.FilterError(
                "this index was built before pages' languages and fetch dates were indexed: "
                "lang:, since: and until: need it built again (srcrawl index --rebuild)"
            )
        for code in units.lang_codes:
            if searcher.doc_freq("lang", code) == 0:
                notes.append(
                    f"no page is in the language «{code}»: lang: takes the ISO 639-1 code of "
                    "a language (lang:en, lang:zh), lang:und the pages whose language is unsure"
                )

    def _facets(
        self, searcher: tantivy.Searcher, memo: object, query: Query | None, mode: str
    ) -> Facets | None:
        """The facets of the pages ``query`` matches (none in mode "none"; None for an index
        without their fields), kept for the commit and the month: the same query asked
        again is not counted again."""
        if not self.reader.has_facets:
            return None
        if mode == "none" or query is None:
            return Facets()
        if memo is not self._counted_in:
            self._counted, self._counted_in = {}, memo
        now = datetime.now(UTC)
        key = f"{now:%Y-%m} {query!r}"
        found = self._counted.get(key)
        if found is None:
            if len(self._counted) >= collect.BEST_SCORES_KEPT:
                self._counted.clear()
            found = self._counted[key] = facet_counts(searcher, query, now)
        return found

    def _suggestion(
        self, searcher: tantivy.Searcher, memo: object, query: str, missing: list[str]
    ) -> str | None:
        """``query`` with each word no page holds replaced by the nearest the index has
        (indexer/search/suggest.py), or None when there is none. Kept for the commit:
        the same misspelling, asked again, walks the index's terms once."""
        if memo is not self._suggested_in:
            self._suggested, self._suggested_in = {}, memo
        fixed = query
        for word in missing:
            if word not in self._suggested:
                if len(self._suggested) >= collect.BEST_SCORES_KEPT:
                    self._suggested.clear()
                self._suggested[word] = suggest(searcher, word)
            fix = self._suggested[word]
            if fix is not None:
                pattern = rf"(?<![\w-]){re.escape(word)}(?!\w)"
                fixed = re.sub(pattern, fix, fixed, flags=re.IGNORECASE)
        return fixed if fixed != query else None

    def _hits(
        self, searcher: tantivy.Searcher, shown: list[Scored], terms: list[str], notes: list[str]
    ) -> list[Hit]:
        """The hits of ``shown`` read from the store, their snippets from the index's stored
        texts; a note if the store lacks some of them."""
        hits = self.hit_reader.hits(shown, terms, searcher)
        if len(hits) < len(shown):
            # the index names pages this store lacks: most likely another job's store
            notes.append(
                f"{len(shown) - len(hits)} of the pages found are not in the store: "
                "is it the store this index was built from?"
            )
        return hits

    def _tier(
        self,
        searcher: tantivy.Searcher,
        query: tantivy.Query,
        top: int,
        prior: Prior,
        pool: int | None = None,
    ) -> tuple[list[Scored], int]:
        """The ``top`` best pages of one tier, the prior blended in and duplicates collapsed
        (exactly: the pool widens until nothing below it can rise into them), and how
        many pages match, counted up to the pool (``pool``, the searcher's by default;
        counting every match would take Tantivy's top-k pruning away: each match would
        be scored)."""
        limit = max(self.pool if pool is None else pool, 4 * top)
        while True:
            # count=False: Tantivy skips the blocks that cannot reach the top (block-max WAND)
            hits = searcher.search(query, limit, count=False).hits
            matches = len(hits)
            if not hits:
                return [], matches
            kept = collect.collapsed(searcher, hits, prior, top)
            if len(hits) < limit or limit >= MAX_POOL:
                return kept, matches
            floor = hits[-1][0] * prior.most()
            if len(kept) == top and kept[-1].score > floor:
                return kept, matches
            limit *= 4


class _Snapshot:
    """The index's searcher and its commit's memo, taken when first asked for."""

    def __init__(self, take: Callable[[], tuple[tantivy.Searcher, dict[str, float]]]) -> None:
        self._take = take
        self._taken: tuple[tantivy.Searcher, dict[str, float]] | None = None

    def taken(self) -> tuple[tantivy.Searcher, dict[str, float]]:
        if self._taken is None:
            self._taken = self._take()
        return self._taken

    def __call__(self) -> tantivy.Searcher:
        return self.taken()[0]
