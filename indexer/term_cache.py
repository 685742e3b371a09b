"""Term postings kept in memory between searches, for a process that serves many.

A search reads each query term's postings from the store and weighs every
posting (BM25F's term weight, fixed by the index's counters). A serving
process sees the same terms again and again, so it keeps, per term, the
postings' pages in page order and their weights, decoded once: a query then
costs no SQL round trip per term and no decoding. All of it is valid for one
*state* of the index, (counters, last block number), read from ``meta`` with
each search (one small read): every merge numbers a new block, so when the
index changes the state does, and everything kept is dropped at once.

The memory is bounded: past ``max_bytes`` the least recently searched terms
are dropped first. One cache is shared by the searching threads of a process.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from srcrawl.defaults import DEFAULT_SEARCH_CACHE_MB


class TermList:
    """One term's postings: pages (int64, ascending) and their weights (float64)."""

    __slots__ = ("_best", "fps", "nbytes", "weights")  # many are kept: no __dict__ each

    def __init__(self, fps: np.ndarray, weights: np.ndarray) -> None:
        self.fps, self.weights = fps, weights
        self._best: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.nbytes = fps.nbytes + weights.nbytes

    @property
    def df(self) -> int:
        return len(self.fps)

    def best(self, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``limit`` postings of highest weight, ties by page, in page order (as
        ``blocks.term_postings`` with a limit keeps them)."""
        found = self._best.get(limit)
        if found is None:
            # the list is in page order, so a stable sort on the weight breaks ties by page
            keep = np.sort(np.argsort(-self.weights, kind="stable")[:limit])
            found = self._best[limit] = (self.fps[keep], self.weights[keep])
        return found

    def among(self, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of the pages ``fps`` (ascending) hold the term (a mask over ``fps``), and
        the weights of those postings."""
        return intersect(self.fps, fps, self.weights)


def intersect(
    have: np.ndarray, fps: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A mask over ``fps`` of the pages also in ``have`` (both ascending, unique) and
    ``weights`` (one per page of ``have``) at those pages."""
    if not len(have) or not len(fps):
        return np.zeros(len(fps), bool), weights[:0]
    at = np.searchsorted(have, fps)
    at[at == len(have)] = 0  # past the end: compared with some page, never equal
    keep = have[at] == fps
    return keep, weights[at[keep]]


class TermCache:
    """:class:`TermList` per term id for one index state; thread-safe."""

    def __init__(self, max_bytes: int = DEFAULT_SEARCH_CACHE_MB << 20) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._state: Hashable = None
        # term id -> (its list, None when no page holds it; the bytes counted for it)
        self._terms: OrderedDict[int, tuple[TermList | None, int]] = OrderedDict()
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._terms)

    def get(
        self, state: Hashable, term_id: int, load: Callable[[], TermList | None]
    ) -> TermList | None:
        """The term's list as of ``state``, from memory or else ``load``-ed and kept.

        A ``state`` other than the one kept drops everything kept first.
        """
        with self._lock:
            if state != self._state:
                self._terms.clear()
                self._state, self._bytes = state, 0
            elif term_id in self._terms:
                self._terms.move_to_end(term_id)
                return self._terms[term_id][0]
        found = load()  # outside the lock: a slow read does not hold up the other threads
        with self._lock:
            if state == self._state and term_id not in self._terms:
                # counted as loaded: the best-postings subsets made later are at most a
                # cap's worth each, small beside the lists themselves
                size = found.nbytes if found is not None else 0
                self._terms[term_id] = (found, size)
                self._bytes += size
                self._shrink()
        return found

    def _shrink(self) -> None:
        while self._bytes > self.max_bytes and len(self._terms) > 1:
            _tid, (_list, size) = self._terms.popitem(last=False)
            self._bytes -= size
