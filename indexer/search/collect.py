"""Collecting a tier's hits: the PageRank prior, duplicates collapsed, the tiers merged.

PageRank is a bounded, query-independent prior on both tiers' scores, with
pr the page's score and m the mean score of the ranked pages::

    score(d, q) = bm25(d, q) · (1 + w · pr / (pr + m))

so rank lifts a score by less than the fraction w (DEFAULT_RANK_WEIGHT), a
page of average rank by w/2, and a page without any of the words is never
found at all. A page that links to many may be lowered the same way by its
out-links (the ``hub`` weight, off by default: measured, not used).

Duplicates collapse into their best-ranked page: the same body tokens (the
``digest`` fast field), or a body simhash within SIMHASH_NEAR_BITS bits
(near-duplicates). A hit says how many similar pages it stands for (among
the pool) and which they are (``members``).

The pages with some of the words count SOME_WORDS_SHARE of their score
(:func:`merge`; a share of 0: listed after every page with every word), and
that tier is left out when no page of it can reach the results
(:func:`fill_cannot_rise`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tantivy

from srcrawl.core.defaults import SIMHASH_NEAR_BITS, SOME_WORDS_SHARE
from srcrawl.indexer.search import query as q

BEST_SCORES_KEPT = 10_000
"""Words whose best score a commit's memo keeps (a key is a query's structure, up to a
few KB): past that it starts again."""

_U64 = (1 << 64) - 1
NEAR = SIMHASH_NEAR_BITS


@dataclass
class Scored:
    """One hit of a tier: its page, BM25 score, blended score and digests."""

    fp: int
    bm25: float
    score: float
    digest: int
    simhash: int
    similar: int = 0
    members: list[int] = field(default_factory=list)  # the pages folded into it
    address: tantivy.DocAddress | None = None  # its document (the stored text)
    doc: tantivy.Document | None = None  # that document, once read (its vector's)


class Prior:
    """PageRank as a bounded factor (see the module doc), read in one rank snapshot."""

    def __init__(self, ranks: object, weight: float, hub: float = 0.0) -> None:
        self.ranks = ranks
        self.weight = weight
        mean = getattr(ranks, "mean", None)
        self.mean = mean if mean and mean > 0 else 0.0
        self.active = weight > 0 and self.mean > 0
        self.hub = hub
        self._link_mean: float | None = None

    def most(self) -> float:
        """The largest factor the prior gives a page (1 when it is not active)."""
        return 1 + self.weight if self.active else 1

    def factors(self, fps: np.ndarray) -> np.ndarray:
        """Each page's factor (``fps``: int64 array): 1 + w·pr/(pr + m), 1 unranked."""
        out = np.ones(len(fps), np.float64)
        if self.active:
            pr = self.ranks.score_array(fps)  # type: ignore[attr-defined]
            ranked = pr > 0
            out[ranked] = 1 + self.weight * pr[ranked] / (pr[ranked] + self.mean)
        if self.hub > 0:
            out *= np.array(self._hub_factors(fps.tolist()), np.float64)
        return out

    def _hub_factors(self, fps: list[int]) -> list[float]:
        """A page that links to many (a table of contents, an index) lowered: by less than
        the fraction ``hub``, a page with the mean number of out-links by half of it. Only
        lowers, so :meth:`most` still bounds a factor."""
        if self._link_mean is None:
            self._link_mean = self.ranks.out_link_mean()  # type: ignore[attr-defined]
        m = self._link_mean
        if m <= 0:
            return [1.0] * len(fps)
        links = self.ranks.out_links(fps)  # type: ignore[attr-defined]
        return [1 - self.hub * n / (n + m) if (n := links.get(fp, 0)) else 1.0 for fp in fps]


def collapsed(searcher: tantivy.Searcher, hits: list, prior: Prior, top: int) -> list[Scored]:
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
    scores = bm25 * prior.factors(fps)
    order = np.lexsort((fps, -scores))  # best first, ties by page
    kept: list[Scored] = []
    by_digest: dict[int, Scored] = {}
    n = 0
    for i in order.tolist():
        if len(kept) == top:
            break
        n += 1
        s = Scored(
            int(fps[i]),
            float(bm25[i]),
            float(scores[i]),
            int(digests[i]),
            int(simhashes[i]),
            address=addresses[i],
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


def _same(s: Scored, kept: list[Scored], by_digest: dict[int, Scored]) -> Scored | None:
    """The kept page ``s`` duplicates, if any."""
    same = by_digest.get(s.digest) if s.digest else None
    if same is None and s.simhash:
        for k in kept:
            if k.simhash and ((k.simhash ^ s.simhash) & _U64).bit_count() <= NEAR:
                return k
    return same


def _count_rest(fps: np.ndarray, digests: np.ndarray, sims: np.ndarray, kept: list[Scored]) -> None:
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


def merge(
    every: list[Scored], some: list[Scored], top: int, share: float = SOME_WORDS_SHARE
) -> list[Scored]:
    """The ``top`` best of the pages with every word and those with some (the latter's
    scores times ``share``; a share of 0 lists them after the former, strict tiers):
    exact, as each list is its tier's best ``top`` (a page of the second tier left out
    has ``top`` pages of its tier above it, each still above it after the share, and the
    pages with every word score as much in either tier). A page folded into a hit of the
    first tier (a duplicate of it) does not come back through the second."""
    seen = {s.fp for s in every} | {m for s in every for m in s.members}
    if share <= 0:
        return (every + [s for s in some if s.fp not in seen])[:top]
    for s in some:
        if s.fp not in seen:
            s.score *= share
            every.append(s)
    every.sort(key=lambda s: (-s.score, s.fp))
    return every[:top]


def fill_cannot_rise(
    searcher: tantivy.Searcher,
    memo: dict[str, float],
    units: q.Units,
    found: list[Scored],
    top: int,
    prior: Prior,
    share: float = SOME_WORDS_SHARE,
) -> bool:
    """Whether no page of the pages-with-some-words query can enter the ``top`` pages with
    every word ``found``, so that query need not run (on common words it scores most of
    the index).

    A page there either holds every word (then it is one of ``found``, folded into one,
    or ranked below the last of them, and its share of its score lower still) or lacks
    a word: it scores at most every unit's best score but the lowest best of a required
    one, times ``share`` and the prior's most. Only for the queries whose units
    are all plain words (no phrase, identifier or filter).

    A unit's best score is a top-1 query, kept in the commit's ``memo``: on a word of
    most pages, whose blocks all score alike, block-max WAND skips few of them, and the
    common words are the ones asked again and again.
    """
    if len(found) < top or not q.flat(units):
        return False
    best = [_best_score(searcher, memo, u) for u in units.required]
    most = sum(best) - min(best) + sum(_best_score(searcher, memo, u) for u in units.optional)
    most *= share * prior.most()
    return most * (1 + 1e-6) < found[-1].score  # (Tantivy sums in single precision)


def unmatched(searcher: tantivy.Searcher, memo: dict[str, float], units: q.Units) -> list[str]:
    """The words of ``units`` that no page holds (each a top-1 query, kept in ``memo``)."""
    return [
        word
        for word, unit in zip(units.words, units.required, strict=True)
        if _best_score(searcher, memo, unit) <= 0.0
    ]


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
