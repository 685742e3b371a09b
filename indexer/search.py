"""Ranked search over the Tantivy index (indexer/engine.py).

A query (indexer/query.py) is answered by two Tantivy queries: the pages with
every word, by BM25 over the fields (block-max WAND, exact top-k), and, when
the query has more than one word, the pages with some of the words (a
disjunction, where a page with more of them scores more), whose scores count
SOME_WORDS_SHARE of their worth. The two lists merge by score: a page that
lacks a word ranks above one with every word only when its words score more
than 1/SOME_WORDS_SHARE (four) times as much (a section that names the topic
throughout but says "move" where the query says "migrate" passes a table of
contents that happens to hold every word once). The second query is left out
when no page lacking a word can reach the results (:func:`_fill_cannot_rise`).

PageRank is a bounded, query-independent prior on both queries' scores, with
pr the page's score and m the mean score of the ranked pages::

    score(d, q) = bm25(d, q) · (1 + w · pr / (pr + m))

so rank lifts a score by less than the fraction w (DEFAULT_RANK_WEIGHT), a
page of average rank by w/2, and a page without any of the words is never
found at all. It is applied to the best DEFAULT_RERANK_POOL hits; the pool is
widened until no page below it could rise into the results (a page below
scores at most the pool's lowest, so at most that times 1 + w after the
prior), so the ranking stays exact.

Duplicates collapse into their best-ranked page: the same body tokens (the
``digest`` fast field), or a body simhash within SIMHASH_NEAR_BITS bits
(near-duplicates). A hit says how many similar pages it stands for (among
the pool) and the URLs of the first SIMILAR_URLS of them.

Snippets come from the page's own text (the host's repeated text, menus
and footers, taken out as the index did) with its original punctuation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tantivy

from srcrawl.defaults import (
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_MAX_QUERY_TERMS,
    DEFAULT_RANK_WEIGHT,
    DEFAULT_RERANK_POOL,
    DEFAULT_SEARCH_TOP,
    DEFAULT_SNIPPET_CHARS,
    MAX_TERM_CHARS,
    SIMHASH_NEAR_BITS,
    SIMILAR_URLS,
    SOME_WORDS_SHARE,
)
from srcrawl.errors import SrcrawlError
from srcrawl.indexer import query as q
from srcrawl.indexer.boilerplate import HostBoilerplate
from srcrawl.indexer.engine import IndexReader, IndexUnavailable, stem
from srcrawl.indexer.snippets import SNIPPET_SCAN_CHARS, make_snippet, words_starting
from srcrawl.indexer.tokenizer import Tokenizer, get_tokenizer, user_dict_from_env
from srcrawl.sql.store import Store
from srcrawl.urls import host_of

MAX_POOL = 20_000
"""Hits a tier reads at most while widening its pool for the prior (a query asks for at
most a few hundred)."""


BEST_SCORES_KEPT = 10_000
"""Words whose best score a commit's memo keeps (a key is a query's structure, up to a
few KB): past that it starts again."""


class QueryError(SrcrawlError):
    """A query that cannot be answered: empty, nothing searchable, no index."""


@dataclass
class Hit:
    url: str
    title: str
    score: float
    snippet: str
    fp: int
    similar: int = 0  # duplicates and near-duplicates collapsed into this hit
    similar_urls: list[str] = field(default_factory=list)  # theirs (at most SIMILAR_URLS)

    def as_json(self) -> dict:
        return {
            "url": self.url,
            "title": self.title,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "similar": self.similar,
            "similar_urls": self.similar_urls,
        }


@dataclass
class SearchResult:
    query: str
    terms: list[str]  # the tokens searched for
    mode: str  # "and" (every word), "or" (no page had every word: some), "none"
    matches: int  # pages with every word (mode "or": with some), counted up to the pool
    ranked: bool  # PageRank was blended in
    hits: list[Hit]
    elapsed_ms: float
    notes: list[str] = field(default_factory=list)


@dataclass
class _Scored:
    """One hit of a tier: its page, BM25 score, blended score and digests."""

    fp: int
    bm25: float
    score: float
    digest: int
    simhash: int
    similar: int = 0
    members: list[int] = field(default_factory=list)  # the pages folded into it


class Searcher:
    """Answers queries from a job's index and store; cheap to keep across queries.

    ``index``: the index directory, or an :class:`IndexReader` to share.
    """

    def __init__(
        self,
        store: Store,
        index: IndexReader | Path | str,
        *,
        tokenizer: Tokenizer | None = None,
        rank_weight: float = DEFAULT_RANK_WEIGHT,
        snippet_chars: int = DEFAULT_SNIPPET_CHARS,
        pool: int = DEFAULT_RERANK_POOL,
        boilerplate: HostBoilerplate | None = None,
    ) -> None:
        self.store = store
        self.reader = index if isinstance(index, IndexReader) else IndexReader(Path(index))
        self.tokenizer = tokenizer or get_tokenizer(user_dict_from_env())
        self.rank_weight = rank_weight
        self.snippet_chars = snippet_chars
        self.pool = pool
        self.boilerplate = boilerplate or HostBoilerplate(store)

    def units(self, query: str) -> tuple[q.Units, list[str]]:
        """The query's units and notes on what was left out; raise QueryError if it is
        empty or has nothing searchable."""
        if not query or not query.strip():
            raise QueryError("empty query: give one or more words to search for")
        notes = []
        if len(query) > DEFAULT_MAX_QUERY_CHARS:
            query = query[:DEFAULT_MAX_QUERY_CHARS]
            notes.append(f"only the first {DEFAULT_MAX_QUERY_CHARS:,} characters were used")
        parsed = q.parse(query)
        units = q.units_of(self.tokenizer, parsed)
        overlong = self.tokenizer.overlong(" ".join(parsed.words + parsed.phrases))
        if overlong:
            # no page holds such a word as a term: say so rather than search without it
            shown = ", ".join(repr(w[:20] + "…") for w in dict.fromkeys(overlong))
            dropped = f"words over {MAX_TERM_CHARS} characters are not indexed: {shown}"
            if not units.positive and not units.sites:
                raise QueryError(f"the query has no searchable words ({dropped})")
            notes.append(f"left out, {dropped}")
        if not units.positive and not units.sites:
            raise QueryError(
                "the query has no searchable words (only stop words, punctuation or symbols)"
            )
        if len(units.required) > DEFAULT_MAX_QUERY_TERMS:
            notes.append(f"only the first {DEFAULT_MAX_QUERY_TERMS} distinct words were used")
            units.keep_required(DEFAULT_MAX_QUERY_TERMS)
        return units, notes

    def search(self, query: str, top: int = DEFAULT_SEARCH_TOP, offset: int = 0) -> SearchResult:
        """The ``top`` best pages for ``query``; raise QueryError if it is unusable.

        With ``offset`` (a later page of results), the hits are those ranked from
        ``offset + 1`` to ``top``.
        """
        t0 = time.perf_counter()
        units, notes = self.units(query)
        try:
            searcher, memo = self.reader.snapshot()
        except IndexUnavailable as e:
            raise QueryError(str(e)) from e
        if searcher.num_docs == 0:
            raise QueryError("the index is empty: run `srcrawl index` first")
        with self.store.rank_snapshot() as ranks:
            prior = _Prior(ranks, self.rank_weight)
            found, matches = self._tier(searcher, q.every_word(units), top, prior)
            mode = "and" if found else "none"
            if units.positive > 1 and not _fill_cannot_rise(
                searcher, memo, units, found, top, prior
            ):
                more, some = self._tier(searcher, q.some_words(units), top, prior)
                found = _merge(found, more, top)
                if mode == "none" and more:
                    mode, matches = "or", some
                    notes.append("no page holds every word; pages holding some of them are shown")
        if mode == "none":
            notes.append("no page holds these words")
        return SearchResult(
            query=query,
            terms=units.terms,
            mode=mode,
            matches=matches,
            ranked=prior.active,
            hits=self._hits(found[offset:top], units.terms),
            elapsed_ms=(time.perf_counter() - t0) * 1000,
            notes=notes,
        )

    def _tier(
        self, searcher: tantivy.Searcher, query: tantivy.Query, top: int, prior: _Prior
    ) -> tuple[list[_Scored], int]:
        """The ``top`` best pages of one tier, the prior blended in and duplicates collapsed
        (exactly: the pool widens until nothing below it can rise into them), and how
        many pages match, counted up to the pool (counting every match would take
        Tantivy's top-k pruning away: each match would be scored)."""
        limit = max(self.pool, 4 * top)
        while True:
            # count=False: Tantivy skips the blocks that cannot reach the top (block-max WAND)
            hits = searcher.search(query, limit, count=False).hits
            matches = len(hits)
            if not hits:
                return [], matches
            kept = _collapsed(searcher, hits, prior, top)
            if len(hits) < limit or limit >= MAX_POOL:
                return kept, matches
            floor = hits[-1][0] * (1 + prior.weight if prior.active else 1)
            if len(kept) == top and kept[-1].score > floor:
                return kept, matches
            limit *= 4

    def _hits(self, found: list[_Scored], terms: list[str]) -> list[Hit]:
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

    def _similar_urls(self, found: list[_Scored]) -> dict[int, str]:
        """The URLs of the pages folded into the hits (the first SIMILAR_URLS of each)."""
        fps = [m for s in found for m in s.members[:SIMILAR_URLS]]
        return {p.fp: p.url for p in self.store.get_pages(fps)} if fps else {}


def _fill_cannot_rise(
    searcher: tantivy.Searcher,
    memo: dict[str, float],
    units: q.Units,
    found: list[_Scored],
    top: int,
    prior: _Prior,
) -> bool:
    """Whether no page of the pages-with-some-words query can enter the ``top`` pages with
    every word ``found``, so that query need not run (on common words it scores most of
    the index).

    A page there either holds every word (then it is one of ``found``, folded into one,
    or ranked below the last of them, and its share of its score lower still) or lacks
    a word: it scores at most every unit's best score but the lowest best of a required
    one, times SOME_WORDS_SHARE and the prior's most. Only for the queries whose units
    are all plain words (no phrase, identifier or filter).

    A unit's best score is a top-1 query, kept in the commit's ``memo``: on a word of
    most pages, whose blocks all score alike, block-max WAND skips few of them, and the
    common words are the ones asked again and again.
    """
    if len(found) < top or not q.flat(units):
        return False
    best = [_best_score(searcher, memo, u) for u in units.required]
    most = sum(best) - min(best) + sum(_best_score(searcher, memo, u) for u in units.optional)
    most *= SOME_WORDS_SHARE * (1 + prior.weight if prior.active else 1)
    return most * (1 + 1e-6) < found[-1].score  # (Tantivy sums in single precision)


def _best_score(searcher: tantivy.Searcher, memo: dict[str, float], query: tantivy.Query) -> float:
    key = repr(query)  # the query's whole structure: its terms, fields and boosts
    best = memo.get(key)
    if best is None:
        hits = searcher.search(query, 1, count=False).hits
        best = hits[0][0] if hits else 0.0
        if len(memo) >= BEST_SCORES_KEPT:
            memo.clear()
        memo[key] = best
    return best


def _merge(every: list[_Scored], some: list[_Scored], top: int) -> list[_Scored]:
    """The ``top`` best of the pages with every word and those with some (the latter's
    scores times SOME_WORDS_SHARE): exact, as each list is its tier's best ``top`` (a page
    of the second tier left out has ``top`` pages of its tier above it, each still above it
    after the share, and the pages with every word score as much in either tier). A page
    folded into a hit of the first tier (a duplicate of it) does not come back through
    the second."""
    seen = {s.fp for s in every} | {m for s in every for m in s.members}
    for s in some:
        if s.fp not in seen:
            s.score *= SOME_WORDS_SHARE
            every.append(s)
    every.sort(key=lambda s: (-s.score, s.fp))
    return every[:top]


def snippet_terms(text: str, terms: list[str]) -> list[str]:
    """``terms`` and the words of ``text`` that the index stems as one of them
    (``splitting`` for ``split``), so a snippet marks what matched."""
    stems = tuple(sorted({stem(t) for t in terms if t.isascii()}))
    if not stems:
        return terms
    words = {w.lower() for w in words_starting(stems).findall(text, 0, SNIPPET_SCAN_CHARS)}
    extra = [w for w in words if w not in terms and stem(w) in stems]
    return [*terms, *sorted(extra)]


class _Prior:
    """PageRank as a bounded factor (see the module doc), read in one rank snapshot."""

    def __init__(self, ranks: object, weight: float) -> None:
        self.ranks = ranks
        self.weight = weight
        mean = getattr(ranks, "mean", None)
        self.mean = mean if mean and mean > 0 else 0.0
        self.active = weight > 0 and self.mean > 0

    def factors(self, fps: list[int]) -> list[float]:
        if not self.active:
            return [1.0] * len(fps)
        scores = self.ranks.scores(fps)  # type: ignore[attr-defined]
        w, m = self.weight, self.mean
        return [1 + w * pr / (pr + m) if (pr := scores.get(fp, 0.0)) > 0 else 1.0 for fp in fps]


def _collapsed(searcher: tantivy.Searcher, hits: list, prior: _Prior, top: int) -> list[_Scored]:
    """The ``top`` best of ``hits`` (ties by page) with the prior blended in, each page
    whose body equals (digest) or nearly equals (simhash) that of a better ranked one
    folded into it and counted in its ``similar`` (pages past the ``top`` only counted).

    The pool is held in arrays: only the pages walked until ``top`` are kept become
    objects (a pool is 200 hits or more, a result 10).
    """
    addresses = [address for _score, address in hits]
    fps = np.array(searcher.fast_field_values("fp", addresses), np.int64)
    digests = _int64s(searcher.fast_field_values("digest", addresses))
    simhashes = _int64s(searcher.fast_field_values("simhash", addresses))
    bm25 = np.array([score for score, _address in hits], np.float64)
    scores = bm25 * np.array(prior.factors(fps.tolist()), np.float64)
    order = np.lexsort((fps, -scores))  # best first, ties by page
    kept: list[_Scored] = []
    by_digest: dict[int, _Scored] = {}
    n = 0
    for i in order.tolist():
        if len(kept) == top:
            break
        n += 1
        s = _Scored(
            int(fps[i]), float(bm25[i]), float(scores[i]), int(digests[i]), int(simhashes[i])
        )
        same = _same(s, kept, by_digest)
        if same is not None:
            same.similar += 1
            same.members.append(s.fp)
        else:
            kept.append(s)
            if s.digest:
                by_digest[s.digest] = s
    if n < len(order) and kept:
        rest = order[n:]
        _count_rest(fps[rest], digests[rest], simhashes[rest].view(np.uint64), kept)
    return kept


def _int64s(values: list[int | None]) -> np.ndarray:
    """Fast-field values as int64 (0 for a page without one)."""
    return np.array([v or 0 for v in values], np.int64)


def _same(s: _Scored, kept: list[_Scored], by_digest: dict[int, _Scored]) -> _Scored | None:
    """The kept page ``s`` duplicates, if any."""
    same = by_digest.get(s.digest) if s.digest else None
    if same is None and s.simhash:
        for k in kept:
            if k.simhash and ((k.simhash ^ s.simhash) & _U64).bit_count() <= NEAR:
                return k
    return same


def _count_rest(
    fps: np.ndarray, digests: np.ndarray, sims: np.ndarray, kept: list[_Scored]
) -> None:
    """Count each page of the rest (its page, digest and simhash arrays) in the first kept
    page it duplicates (all at once)."""
    ksims = np.fromiter((k.simhash for k in kept), np.int64, len(kept)).view(np.uint64)
    kdigests = np.fromiter((k.digest for k in kept), np.int64, len(kept))
    near = np.bitwise_count(sims[:, None] ^ ksims[None, :]) <= NEAR
    near &= (sims[:, None] != 0) & (ksims[None, :] != 0)
    near |= (digests[:, None] == kdigests[None, :]) & (digests[:, None] != 0)
    hit = np.flatnonzero(near.any(axis=1))
    for i, j in zip(hit.tolist(), near.argmax(axis=1)[hit].tolist(), strict=True):
        kept[j].similar += 1
        kept[j].members.append(int(fps[i]))


_U64 = (1 << 64) - 1
NEAR = SIMHASH_NEAR_BITS
