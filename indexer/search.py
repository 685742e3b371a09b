"""Ranked search: BM25 over the postings, blended with PageRank when ranks exist.

BM25, with N indexed documents of mean length avgdl::

    idf(t)       = ln(1 + (N − df + 0.5) / (df + 0.5))          (never negative)
    bm25(d, q)   = Σ idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl))

Blending, with pr the page's PageRank score and m the mean score of the
ranked pages (a page without a rank has pr = 0)::

    score(d, q)  = bm25(d, q) · (1 + w · pr / (pr + m))

so PageRank raises a score by at most the fraction w, a page of average rank
by w/2. Without any rank, the score is BM25 alone.

Retrieval is term-at-a-time, rarest term first. AND: the rarest term's
postings are the candidates, and each further term keeps the candidates it
also occurs in (looked up by page when that is cheaper than reading its
list). When no page holds every term, OR: every term adds to the score of
the pages it occurs in. A term's postings are read in full up to a cap;
beyond it, only the cap's worth of postings with the highest BM25 term weight
are read (the result is then marked approximate).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import takewhile

from srcrawl.defaults import (
    BM25_B,
    BM25_K1,
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_MAX_QUERY_TERMS,
    DEFAULT_RANK_STATS_TTL,
    DEFAULT_RANK_WEIGHT,
    DEFAULT_SEARCH_POSTINGS_CAP,
    DEFAULT_SEARCH_TOP,
    DEFAULT_SNIPPET_CHARS,
)
from srcrawl.errors import SrcrawlError
from srcrawl.indexer.snippets import make_snippet
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


def bm25_idf(n_docs: int, df: int) -> float:
    """ln(1 + (N − df + 0.5)/(df + 0.5)), never below 0."""
    return max(0.0, math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)))


@dataclass
class _Scoring:
    """BM25's term weight tf·(k1+1)/(tf + c + a·dl), with c and a fixed for one query."""

    k1: float
    c: float
    a: float
    capped: bool = False  # some term's postings were cut at the cap

    def weight(self, tf: int, dl: int) -> float:
        return tf * (self.k1 + 1) / (tf + self.c + self.a * dl)


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
    ) -> None:
        self.store = store
        self.tokenizer = tokenizer or get_tokenizer(user_dict_from_env())
        self.k1, self.b, self.cap = k1, b, cap
        self.rank_weight = rank_weight
        self.snippet_chars = snippet_chars
        self._rank_mean: tuple[float, float | None] | None = None  # (read at, mean)

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
        if not terms:
            raise QueryError(
                "the query has no searchable words (only stop words, punctuation or symbols)"
            )
        if len(terms) > DEFAULT_MAX_QUERY_TERMS:
            notes.append(f"only the first {DEFAULT_MAX_QUERY_TERMS} distinct words were used")
            terms = terms[:DEFAULT_MAX_QUERY_TERMS]
        return terms, notes

    def search(self, query: str, top: int = DEFAULT_SEARCH_TOP) -> SearchResult:
        """The ``top`` best pages for ``query``; raise QueryError if it is unusable."""
        t0 = time.perf_counter()
        terms, notes = self.query_terms(query)
        n_docs, total_length = self.store.index_stats()
        if n_docs == 0:
            raise QueryError("the index is empty: run `srcrawl index` first")
        avgdl = total_length / n_docs if total_length > 0 else 1.0
        q = _Scoring(self.k1, self.k1 * (1 - self.b), self.k1 * self.b / avgdl)
        found = self.store.lookup_terms(terms)
        known = sorted((t for t in terms if t in found), key=lambda t: (found[t][1], t))
        idf = {t: bm25_idf(n_docs, found[t][1]) for t in known}
        scores: dict[int, float] = {}
        mode = "none"
        if known and len(known) == len(terms):
            scores, mode = self._conjunctive(q, known, found, idf), "and"
        if not scores and known:
            scores, mode = self._disjunctive(q, known, found, idf), "or"
            if len(terms) > 1:
                notes.append("no page holds every word; pages holding any of them are shown")
        if mode == "none":
            notes.append("no page holds any of these words")
        missing = [t for t in terms if t not in found]
        if missing and known:
            notes.append("not in any page: " + " ".join(missing))
        best, ranked = self._best(scores, top)
        pages = {row[0]: row for row in self.store.index_documents([fp for fp, _ in best])}
        hits = []
        for fp, score in best:
            if fp in pages:
                _fp, _at, url, title, text = pages[fp]
                snippet = make_snippet(text, terms, self.snippet_chars)
                hits.append(Hit(url, title, score, snippet, fp))
        return SearchResult(
            query=query,
            terms=terms,
            mode=mode,
            matches=len(scores),
            approximate=q.capped,
            ranked=ranked,
            hits=hits,
            elapsed_ms=(time.perf_counter() - t0) * 1000,
            notes=notes,
        )

    # -- retrieval ---------------------------------------------------------------
    def _postings(
        self, q: _Scoring, term_id: int, df: int, limit: int
    ) -> list[tuple[int, int, int]]:
        if df <= limit:
            return self.store.term_postings(term_id)
        q.capped = True
        return self.store.term_postings(term_id, limit=limit, norm=(q.c, q.a))

    def _conjunctive(
        self,
        q: _Scoring,
        terms: Sequence[str],
        found: dict[str, tuple[int, int]],
        idf: dict[str, float],
    ) -> dict[int, float]:
        weight = q.weight
        first = terms[0]
        w = idf[first]
        acc = {fp: w * weight(tf, dl) for fp, tf, dl in self._postings(q, *found[first], self.cap)}
        for term in terms[1:]:
            if not acc:
                break
            term_id, df = found[term]
            w = idf[term]
            # a short list is read whole; a long one is probed for the candidates only
            if df <= 4 * len(acc):
                rows = self.store.term_postings(term_id)
            else:
                rows = self.store.term_postings_among(term_id, list(acc))
            kept: dict[int, float] = {}
            for fp, tf, dl in rows:
                score = acc.get(fp)
                if score is not None:
                    kept[fp] = score + w * weight(tf, dl)
            acc = kept
        return acc

    def _disjunctive(
        self,
        q: _Scoring,
        terms: Sequence[str],
        found: dict[str, tuple[int, int]],
        idf: dict[str, float],
    ) -> dict[int, float]:
        weight = q.weight
        # many terms share a budget, so a long query reads no more than a short one
        limit = self.cap if len(terms) <= 4 else max(self.cap * 4 // len(terms), 200)
        acc: dict[int, float] = defaultdict(float)
        for term in terms:
            w = idf[term]
            for fp, tf, dl in self._postings(q, *found[term], limit):
                acc[fp] += w * weight(tf, dl)
        return dict(acc)

    # -- ranking -----------------------------------------------------------------
    def rank_mean(self) -> float | None:
        """The mean PageRank score (None: no ranks), re-read every few seconds."""
        now = time.monotonic()
        if self._rank_mean is None or now - self._rank_mean[0] > DEFAULT_RANK_STATS_TTL:
            self._rank_mean = (now, self.store.rank_mean())
        return self._rank_mean[1]

    def _best(self, scores: dict[int, float], top: int) -> tuple[list[tuple[int, float]], bool]:
        """The ``top`` (fp, score) pairs, PageRank blended in when ranks exist."""
        order = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        mean = self.rank_mean() if order else None
        if not mean or mean <= 0 or self.rank_weight <= 0:
            return order[:top], False
        # blending raises a score by at most (1 + w): pages below kth/(1 + w) cannot reach
        # the top, so only the pages above that bound need their rank
        kth = order[top - 1][1] if len(order) >= top else 0.0
        bound = kth / (1 + self.rank_weight)
        pool = list(takewhile(lambda kv: kv[1] >= bound, order))
        ranks = self.store.page_ranks([fp for fp, _ in pool])
        w = self.rank_weight
        blended = []
        for fp, score in pool:
            pr = ranks.get(fp, 0.0)
            blended.append((fp, score * (1 + w * pr / (pr + mean)) if pr > 0 else score))
        blended.sort(key=lambda kv: (-kv[1], kv[0]))
        return blended[:top], True
