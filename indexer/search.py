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
    DEFAULT_RANK_STATS_TTL,
    DEFAULT_RANK_WEIGHT,
    DEFAULT_SEARCH_POSTINGS_CAP,
    DEFAULT_SEARCH_TOP,
    DEFAULT_SNIPPET_CHARS,
    MAX_TERM_CHARS,
)
from srcrawl.errors import SrcrawlError
from srcrawl.indexer.blocks import term_postings, term_postings_among
from srcrawl.indexer.postings import term_fingerprint
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

    def search(self, query: str, top: int = DEFAULT_SEARCH_TOP) -> SearchResult:
        """The ``top`` best pages for ``query``; raise QueryError if it is unusable."""
        t0 = time.perf_counter()
        terms, notes = self.query_terms(query)
        lengths = self.store.index_lengths()
        n_docs = lengths[0]
        if n_docs == 0:
            raise QueryError("the index is empty: run `srcrawl index` first")
        q = _Scoring.of(self.k1, self.b, lengths)
        ids = {t: term_fingerprint(t) for t in terms}
        dfs = self.store.lookup_terms(list(ids.values()))
        found = {t: (ids[t], dfs[ids[t]]) for t in terms if ids[t] in dfs}
        known = sorted((t for t in terms if t in found), key=lambda t: (found[t][1], t))
        idf = {t: bm25_idf(n_docs, found[t][1]) for t in known}
        fps, scores = np.zeros(0, np.int64), np.zeros(0)
        mode = "none"
        if known and len(known) == len(terms):
            (fps, scores), mode = self._conjunctive(q, known, found, idf), "and"
        if not len(fps) and known:
            (fps, scores), mode = self._disjunctive(q, known, found, idf), "or"
            if len(terms) > 1:
                notes.append("no page holds every word; pages holding any of them are shown")
        if mode == "none":
            notes.append("no page holds any of these words")
        missing = [t for t in terms if t not in found]
        if missing and known:
            notes.append("not in any page: " + " ".join(missing))
        best, ranked = self._best(fps, scores, top)
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
            matches=len(fps),
            approximate=q.capped,
            ranked=ranked,
            hits=hits,
            elapsed_ms=(time.perf_counter() - t0) * 1000,
            notes=notes,
        )

    # -- retrieval ---------------------------------------------------------------
    # Postings arrive as numpy records (posting_dtype) in page order; scores are
    # kept as two arrays, pages (sorted) and their scores.
    def _postings(self, q: _Scoring, term_id: int, df: int, limit: int) -> np.ndarray:
        if df <= limit:
            return term_postings(self.store, term_id)
        q.capped = True
        return term_postings(self.store, term_id, limit=limit, weigh=q.weights)

    def _conjunctive(
        self,
        q: _Scoring,
        terms: Sequence[str],
        found: dict[str, tuple[int, int]],
        idf: dict[str, float],
    ) -> tuple[np.ndarray, np.ndarray]:
        first = self._postings(q, *found[terms[0]], self.cap)
        fps, scores = first["fp"], idf[terms[0]] * q.weights(first)
        for term in terms[1:]:
            if not len(fps):
                break
            term_id, df = found[term]
            # a short list is read whole; a long one only in the blocks of the candidates
            if df <= WHOLE_LIST_FACTOR * len(fps):
                rows = term_postings(self.store, term_id)
            else:
                rows = term_postings_among(self.store, term_id, fps.tolist())
            fps, mine, theirs = np.intersect1d(
                fps, rows["fp"], assume_unique=True, return_indices=True
            )
            scores = scores[mine] + idf[term] * q.weights(rows[theirs])
        return fps, scores

    def _disjunctive(
        self,
        q: _Scoring,
        terms: Sequence[str],
        found: dict[str, tuple[int, int]],
        idf: dict[str, float],
    ) -> tuple[np.ndarray, np.ndarray]:
        # many terms share a budget, so a long query reads no more than a short one
        limit = self.cap if len(terms) <= 4 else max(self.cap * 4 // len(terms), 200)
        lists = [self._postings(q, *found[t], limit) for t in terms]
        every = np.concatenate([r["fp"] for r in lists])
        weights = np.concatenate([idf[t] * q.weights(r) for t, r in zip(terms, lists, strict=True)])
        fps, inverse = np.unique(every, return_inverse=True)
        return fps, np.bincount(inverse.ravel(), weights=weights, minlength=len(fps))

    # -- ranking -----------------------------------------------------------------
    def rank_mean(self) -> float | None:
        """The mean PageRank score (None: no ranks), re-read every few seconds."""
        now = time.monotonic()
        if self._rank_mean is None or now - self._rank_mean[0] > DEFAULT_RANK_STATS_TTL:
            self._rank_mean = (now, self.store.rank_mean())
        return self._rank_mean[1]

    def _best(
        self, fps: np.ndarray, scores: np.ndarray, top: int
    ) -> tuple[list[tuple[int, float]], bool]:
        """The ``top`` (fp, score) pairs, PageRank blended in when ranks exist."""
        mean = self.rank_mean() if len(fps) else None
        blend = bool(mean and mean > 0 and self.rank_weight > 0)
        order = np.lexsort((fps, -scores))
        if not blend:
            best = order[:top]
            return list(zip(fps[best].tolist(), scores[best].tolist(), strict=True)), False
        # blending raises a score by at most (1 + w): pages below kth/(1 + w) cannot reach
        # the top, so only the pages above that bound need their rank
        kth = float(scores[order[top - 1]]) if len(order) >= top else 0.0
        bound = kth / (1 + self.rank_weight)
        ranked = scores[order]
        n = int(np.count_nonzero(ranked >= bound))  # in descending order: a prefix
        pool = list(zip(fps[order[:n]].tolist(), ranked[:n].tolist(), strict=True))
        ranks = self.store.page_ranks([fp for fp, _ in pool])
        w = self.rank_weight
        blended = []
        for fp, score in pool:
            pr = ranks.get(fp, 0.0)
            blended.append((fp, score * (1 + w * pr / (pr + mean)) if pr > 0 else score))
        blended.sort(key=lambda kv: (-kv[1], kv[0]))
        return blended[:top], True
