"""Ranked search: BM25F over the postings, blended with PageRank when ranks exist.

BM25F [Robertson and Zaragoza] over a page's fields f (body, title, and
the anchor text of links to it), with N indexed documents, field weights
w_f, length normalisation b_f and mean field lengths avgdl_f::

    idf(t)       = ln(1 + (N − df + 0.5) / (df + 0.5))          (never negative)
    tf_f'(d, t)  = tf_f / (1 − b_f + b_f·dl_f/avgdl_f)
    x(d, t)      = Σ_f w_f · tf_f'(d, t)
    bm25f(d, q)  = Σ idf(t) · x·(k1 + 1) / (x + k1)

where the body's tf counts an occurrence in text the page's host repeats on
most of its pages (boilerplate, see indexer/boilerplate.py) as
BOILERPLATE_WEIGHT of one in the page's own text. df counts the pages that
hold the term in any field. The weights are FIELD_WEIGHTS and FIELD_B.

Blending, with pr the page's PageRank score and m the mean score of the
ranked pages (a page without a rank has pr = 0)::

    score(d, q)  = bm25(d, q) · (1 + w · pr / (pr + m))

so PageRank raises a score by at most the fraction w, a page of average rank
by w/2. Without any rank, the score is BM25F alone.

Retrieval is term-at-a-time, rarest term first. AND: the rarest term's
postings are the candidates, and each further term keeps the candidates it
also occurs in (when its list is long, only the blocks holding the
candidates' postings are read). When no page holds every term, OR: every
term adds to the score of the pages it occurs in. A term's postings are read in full up to a cap;
beyond it, only the cap's worth of postings with the highest BM25F term weight
are read (the result is then marked approximate).

A searcher given a :class:`~srcrawl.indexer.term_cache.TermCache` (the portal's)
keeps each term's postings and weights in memory between queries, read again
only when the index changes; a query then reads from the store only ``meta``
and the shown pages. Either way the results are the same.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from srcrawl.defaults import (
    BM25_B,
    BM25_K1,
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_MAX_QUERY_TERMS,
    DEFAULT_RANK_WEIGHT,
    DEFAULT_SEARCH_POSTINGS_CAP,
    DEFAULT_SEARCH_TOP,
    DEFAULT_SNIPPET_CHARS,
    MAX_TERM_CHARS,
)
from srcrawl.errors import SrcrawlError
from srcrawl.indexer.blocks import records, term_postings, term_postings_among
from srcrawl.indexer.postings import term_fingerprint
from srcrawl.indexer.snippets import make_snippet
from srcrawl.indexer.term_cache import TermCache, TermList, intersect
from srcrawl.indexer.tokenizer import Tokenizer, get_tokenizer, user_dict_from_env
from srcrawl.sql.store import Store


class QueryError(SrcrawlError):
    """A query that cannot be answered: empty, nothing searchable, no index."""


@dataclass
class Hit:
    url: str
    title: str
    score: float
    snippet: str
    fp: int

    def as_json(self) -> dict:
        return {"url": self.url, "title": self.title, "score": round(self.score, 6),
                "snippet": self.snippet}  # fmt: skip


@dataclass
class SearchResult:
    query: str
    terms: list[str]  # the terms searched for
    mode: str  # "and", "or" (no page had every term), or "none" (no term is indexed)
    matches: int  # pages scored
    approximate: bool  # some term's postings were cut at the cap
    ranked: bool  # PageRank was blended in
    hits: list[Hit]
    elapsed_ms: float
    notes: list[str] = field(default_factory=list)


FIELD_WEIGHTS = {"body": 1.0, "title": 6.0, "anchor": 4.0}
"""w_f: how much an occurrence in each field counts against one in the body. Set on the
known-item queries of `srcrawl bench search`: at title 3, anchor 2 a page whose body
repeats common words often (saturated by k1) outranked the page with them in its title,
and the anchor field lost to the linking pages' bodies (success@3 0.87)."""
FIELD_B = {"title": 0.5, "anchor": 0.6}
"""b_f of the title and anchor fields (the body's is the Searcher's ``b``)."""
BOILERPLATE_WEIGHT = 0.2
"""What an occurrence in the host's boilerplate counts in the body, against one in the
page's own text."""

WHOLE_LIST_FACTOR = 16
"""A further AND term's list is read whole up to this many postings per candidate, else only
its blocks holding the candidates. Measured on 50,000 pages (SQLite): a whole list costs
≈ 0.06 µs a posting, the candidates' blocks ≈ 1.7 ms + 1.4 µs a candidate (finding each
candidate's block), so up to ~20 postings a candidate the whole list is cheaper."""


def bm25_idf(n_docs: int, df: int) -> float:
    """ln(1 + (N − df + 0.5)/(df + 0.5)), never below 0."""
    return max(0.0, math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)))


@dataclass
class _Scoring:
    """BM25F's term weight x·(k1+1)/(x + k1) of a posting, its field norms fixed for one
    query: per field, (w_f, 1 − b_f, b_f/avgdl_f) in ``body``, ``title``, ``anchor``."""

    k1: float
    body: tuple[float, float, float]
    title: tuple[float, float, float]
    anchor: tuple[float, float, float]
    capped: bool = False  # some term's postings were cut at the cap

    @classmethod
    def of(cls, k1: float, b: float, lengths: tuple[int, int, int, int]) -> _Scoring:
        """The scoring for index counters ``lengths`` (docs, body, title, anchor lengths)."""
        docs = max(lengths[0], 1)

        def norm(field: str, b_f: float, total: int) -> tuple[float, float, float]:
            avgdl = total / docs if total > 0 else 1.0
            return FIELD_WEIGHTS[field], 1.0 - b_f, b_f / avgdl

        return cls(
            k1,
            norm("body", b, lengths[1]),
            norm("title", FIELD_B["title"], lengths[2]),
            norm("anchor", FIELD_B["anchor"], lengths[3]),
        )

    def weights(self, postings: np.ndarray) -> np.ndarray:
        """The weight of each posting (records of indexer/blocks.py's posting_dtype)."""
        (wb, cb, ab), (wt, ct, at), (wa, ca, aa) = self.body, self.title, self.anchor
        body = postings["tf"] + BOILERPLATE_WEIGHT * postings["boiler"]
        x = wb * body / (cb + ab * postings["dl"])
        ttf, atf = postings["ttf"], postings["atf"]
        if ttf.any():
            x += wt * ttf / (ct + at * postings["tdl"])
        if atf.any():
            x += wa * atf / (ca + aa * postings["adl"])
        return x * (self.k1 + 1) / (x + self.k1)


class _StoreSource:
    """Postings read from the store for one query (a search of its own, as on the
    command line)."""

    def __init__(self, store: Store, q: _Scoring) -> None:
        self.store, self.q = store, q

    def dfs(self, term_ids: list[int]) -> dict[int, int]:
        """term id -> document frequency of the indexed terms among ``term_ids``."""
        return self.store.lookup_terms(term_ids)

    def postings(self, term_id: int, df: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """The term's pages and weights; past ``limit`` postings, the best ``limit``."""
        if df <= limit:
            recs = term_postings(self.store, term_id)
        else:
            self.q.capped = True
            recs = term_postings(self.store, term_id, limit=limit, weigh=self.q.weights)
        return recs["fp"], self.q.weights(recs)

    def among(self, term_id: int, df: int, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A mask over the candidates ``fps`` of those holding the term, and its weights
        there."""
        # a short list is read whole; a long one only in the blocks of the candidates
        if df <= WHOLE_LIST_FACTOR * len(fps):
            rows = term_postings(self.store, term_id)
        else:
            rows = term_postings_among(self.store, term_id, fps.tolist())
        keep, at = intersect(rows["fp"], fps, np.arange(len(rows)))
        return keep, self.q.weights(rows[at])


class _CachedSource:
    """Postings and their weights from a :class:`TermCache`, read and weighed once per
    index state."""

    def __init__(self, store: Store, q: _Scoring, cache: TermCache, state: tuple) -> None:
        self.store, self.q, self.cache, self.state = store, q, cache, state
        self.lists: dict[int, TermList] = {}

    def _load(self, term_id: int) -> TermList | None:
        recs = records(self.store.term_blocks(term_id))
        if not len(recs):
            return None
        recs = recs[np.argsort(recs["fp"], kind="stable")]
        return TermList(np.ascontiguousarray(recs["fp"]), self.q.weights(recs))

    def dfs(self, term_ids: list[int]) -> dict[int, int]:
        for tid in term_ids:
            found = self.cache.get(self.state, tid, lambda tid=tid: self._load(tid))
            if found is not None:
                self.lists[tid] = found
        return {tid: found.df for tid, found in self.lists.items()}

    def postings(self, term_id: int, df: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
        found = self.lists[term_id]
        if df <= limit:
            return found.fps, found.weights
        self.q.capped = True
        return found.best(limit)

    def among(self, term_id: int, _df: int, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.lists[term_id].among(fps)


class Searcher:
    """Answers queries from one store's index; cheap to keep across queries."""

    def __init__(
        self,
        store: Store,
        *,
        tokenizer: Tokenizer | None = None,
        k1: float = BM25_K1,
        b: float = BM25_B,
        cap: int = DEFAULT_SEARCH_POSTINGS_CAP,
        rank_weight: float = DEFAULT_RANK_WEIGHT,
        snippet_chars: int = DEFAULT_SNIPPET_CHARS,
        cache: TermCache | None = None,
    ) -> None:
        self.store = store
        self.cache = cache
        self.tokenizer = tokenizer or get_tokenizer(user_dict_from_env())
        self.k1, self.b, self.cap = k1, b, cap
        self.rank_weight = rank_weight
        self.snippet_chars = snippet_chars

    def query_terms(self, query: str) -> tuple[list[str], list[str]]:
        """The distinct terms of ``query`` in order, and notes on what was left out.

        Raises QueryError for an empty query or one with nothing searchable.
        """
        if not query or not query.strip():
            raise QueryError("empty query: give one or more words to search for")
        notes = []
        if len(query) > DEFAULT_MAX_QUERY_CHARS:
            query = query[:DEFAULT_MAX_QUERY_CHARS]
            notes.append(f"only the first {DEFAULT_MAX_QUERY_CHARS:,} characters were used")
        terms = list(dict.fromkeys(self.tokenizer.tokens(query)))
        overlong = self.tokenizer.overlong(query)
        if overlong:
            # no page holds such a word as a term: say so rather than search without it
            shown = ", ".join(repr(w[:20] + "…") for w in dict.fromkeys(overlong))
            dropped = f"words over {MAX_TERM_CHARS} characters are not indexed: {shown}"
            if not terms:
                raise QueryError(f"the query has no searchable words ({dropped})")
            notes.append(f"left out, {dropped}")
        if not terms:
            raise QueryError(
                "the query has no searchable words (only stop words, punctuation or symbols)"
            )
        if len(terms) > DEFAULT_MAX_QUERY_TERMS:
            notes.append(f"only the first {DEFAULT_MAX_QUERY_TERMS} distinct words were used")
            terms = terms[:DEFAULT_MAX_QUERY_TERMS]
        return terms, notes

    def search(self, query: str, top: int = DEFAULT_SEARCH_TOP, offset: int = 0) -> SearchResult:
        """The ``top`` best pages for ``query``; raise QueryError if it is unusable.

        With ``offset`` (a later page of results), the hits are those ranked from
        ``offset + 1`` to ``top``: the pages ranked before are not read.
        """
        t0 = time.perf_counter()
        terms, notes = self.query_terms(query)
        lengths, block, ranked = self.store.index_state()
        n_docs = lengths[0]
        if n_docs == 0:
            raise QueryError("the index is empty: run `srcrawl index` first")
        q = _Scoring.of(self.k1, self.b, lengths)
        src = self._source(q, (lengths, block))
        ids = {t: term_fingerprint(t) for t in terms}
        dfs = src.dfs(list(ids.values()))
        found = {t: (ids[t], dfs[ids[t]]) for t in terms if ids[t] in dfs}
        known = sorted((t for t in terms if t in found), key=lambda t: (found[t][1], t))
        idf = {t: bm25_idf(n_docs, found[t][1]) for t in known}
        fps, scores = np.zeros(0, np.int64), np.zeros(0)
        mode = "none"
        if known and len(known) == len(terms):
            (fps, scores), mode = self._conjunctive(src, known, found, idf), "and"
        if not len(fps) and known:
            (fps, scores), mode = self._disjunctive(src, known, found, idf), "or"
            if len(terms) > 1:
                notes.append("no page holds every word; pages holding any of them are shown")
        if mode == "none":
            notes.append("no page holds any of these words")
        missing = [t for t in terms if t not in found]
        if missing and known:
            notes.append("not in any page: " + " ".join(missing))
        best, ranked = self._best(fps, scores, top, ranked)
        return SearchResult(
            query=query,
            terms=terms,
            mode=mode,
            matches=len(fps),
            approximate=q.capped,
            ranked=ranked,
            hits=self._hits(best[offset:], terms),
            elapsed_ms=(time.perf_counter() - t0) * 1000,
            notes=notes,
        )

    def _hits(self, best: list[tuple[int, float]], terms: list[str]) -> list[Hit]:
        pages = {row[0]: row for row in self.store.index_documents([fp for fp, _ in best])}
        hits = []
        for fp, score in best:
            if fp in pages:
                _fp, _at, url, title, text = pages[fp]
                snippet = make_snippet(text, terms, self.snippet_chars)
                hits.append(Hit(url, title, score, snippet, fp))
        return hits

    # -- retrieval ---------------------------------------------------------------
    # A source gives each term's postings as two arrays in page order: the pages and
    # the BM25F term weight of each posting. Scores are kept the same way: the
    # candidate pages (ascending) and their scores.
    def _source(self, q: _Scoring, state: tuple) -> _StoreSource | _CachedSource:
        if self.cache is None:
            return _StoreSource(self.store, q)
        # the weights depend on the scoring's parameters too: a searcher with others
        # does not take (or leave) weights of its own in a shared cache
        return _CachedSource(self.store, q, self.cache, (state, self.k1, self.b))

    def _conjunctive(
        self,
        src: _StoreSource | _CachedSource,
        terms: Sequence[str],
        found: dict[str, tuple[int, int]],
        idf: dict[str, float],
    ) -> tuple[np.ndarray, np.ndarray]:
        fps, weights = src.postings(*found[terms[0]], self.cap)
        scores = idf[terms[0]] * weights
        for term in terms[1:]:
            if not len(fps):
                break
            keep, weights = src.among(*found[term], fps)
            fps, scores = fps[keep], scores[keep] + idf[term] * weights
        return fps, scores

    def _disjunctive(
        self,
        src: _StoreSource | _CachedSource,
        terms: Sequence[str],
        found: dict[str, tuple[int, int]],
        idf: dict[str, float],
    ) -> tuple[np.ndarray, np.ndarray]:
        # many terms share a budget, so a long query reads no more than a short one
        limit = self.cap if len(terms) <= 4 else max(self.cap * 4 // len(terms), 200)
        lists = [src.postings(*found[t], limit) for t in terms]
        every = np.concatenate([fps for fps, _w in lists])
        weights = np.concatenate([idf[t] * w for t, (_f, w) in zip(terms, lists, strict=True)])
        fps, inverse = np.unique(every, return_inverse=True)
        return fps, np.bincount(inverse.ravel(), weights=weights, minlength=len(fps))

    # -- ranking -----------------------------------------------------------------
    def _best(
        self, fps: np.ndarray, scores: np.ndarray, top: int, ranked: bool
    ) -> tuple[list[tuple[int, float]], bool]:
        """The ``top`` (fp, score) pairs, PageRank blended in when ranks exist (``ranked``:
        the index's state said so; the scores and their mean are then read together)."""
        order = _top_order(fps, scores, top)
        if not ranked or not len(fps) or self.rank_weight <= 0:
            return _pairs(fps[order], scores[order]), False
        with self.store.rank_snapshot() as ranked:
            if not ranked.mean or ranked.mean <= 0:
                return _pairs(fps[order], scores[order]), False
            # blending raises a score by at most (1 + w): pages below kth/(1 + w) cannot
            # reach the top, so only the pages above that bound need their rank
            kth = float(scores[order[top - 1]]) if len(order) >= top else 0.0
            within = np.flatnonzero(scores >= kth / (1 + self.rank_weight))  # in any order
            pool = _pairs(fps[within], scores[within])
            ranks, mean = ranked.scores([fp for fp, _ in pool]), ranked.mean
        w = self.rank_weight
        blended = []
        for fp, score in pool:
            pr = ranks.get(fp, 0.0)
            blended.append((fp, score * (1 + w * pr / (pr + mean)) if pr > 0 else score))
        blended.sort(key=lambda kv: (-kv[1], kv[0]))
        return blended[:top], True


def _pairs(fps: np.ndarray, scores: np.ndarray) -> list[tuple[int, float]]:
    return list(zip(fps.tolist(), scores.tolist(), strict=True))


def _top_order(fps: np.ndarray, scores: np.ndarray, top: int) -> np.ndarray:
    """Indices of the ``top`` highest ``scores``, best first, ties by page (``fps``): the
    first ``top`` of a full sort, sorting only the pages that can be among them."""
    if 0 < top < len(scores):
        kth = np.partition(scores, len(scores) - top)[len(scores) - top]  # the top-th best
        within = np.flatnonzero(scores >= kth)  # every tie of the top-th score with it
    else:
        within = np.arange(len(scores))
    return within[np.lexsort((fps[within], -scores[within]))][: max(top, 0)]
