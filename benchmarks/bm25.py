"""Plain BM25, the baseline srcrawl's ranking is judged against on real corpora.

Okapi BM25 [Robertson and Zaragoza 2009] over each page's one text (the title
counted as text), with no fields, no boilerplate weighting and no PageRank, and
the idf that is never negative (Lucene's)::

    idf(t)    = ln(1 + (N − df + 0.5) / (df + 0.5))
    score(d)  = Σ_t idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl))

over the query's distinct terms. It is built from token lists, so the caller
tokenizes documents and queries with srcrawl's own tokenizer: the comparison is
then about ranking, not about what a word is.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from srcrawl.core.defaults import BM25_B, BM25_K1


class BM25:
    """An in-memory inverted index of token lists, ranked by plain BM25."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = BM25_K1, b: float = BM25_B):
        self.k1, self.b, self.n = k1, b, len(docs)
        self.lengths = np.array([len(d) for d in docs], dtype=np.float64)
        self.avgdl = float(self.lengths.mean()) if self.n and self.lengths.sum() else 1.0
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, doc in enumerate(docs):
            for term, tf in Counter(doc).items():
                ids, tfs = postings.setdefault(term, ([], []))
                ids.append(i)
                tfs.append(tf)
        self.postings = {
            t: (np.array(ids, dtype=np.int64), np.array(tfs, dtype=np.float64))
            for t, (ids, tfs) in postings.items()
        }

    def idf(self, term: str) -> float:
        df = len(self.postings[term][0]) if term in self.postings else 0
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, terms: Sequence[str]) -> np.ndarray:
        """The score of every document for the query ``terms`` (0 where none occurs)."""
        out = np.zeros(self.n)
        norm = self.k1 * (1.0 - self.b + self.b * self.lengths / self.avgdl)
        for term in dict.fromkeys(terms):
            if term not in self.postings:
                continue
            ids, tf = self.postings[term]
            out[ids] += self.idf(term) * tf * (self.k1 + 1.0) / (tf + norm[ids])
        return out

    def top(self, terms: Sequence[str], k: int) -> list[int]:
        """The ``k`` best documents holding a query term, best first (ties: lower index)."""
        s = self.scores(terms)
        hit = np.flatnonzero(s > 0)
        return hit[np.lexsort((hit, -s[hit]))][:k].tolist()
