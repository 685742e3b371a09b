"""How long a stored page takes to become searchable, as ``srcrawl index --follow`` measures it.

A page's delay is the time from its store write to the commit of the merge
that makes it searchable. The store keeps no separate write time: a crawl
slave stamps ``fetched_at`` as it builds the page row and writes the row in
its next store batch, so ``merge commit - fetched_at`` is the delay plus at
most that batch's wait (an upper bound, never an underestimate). Only pages
stored after the follow run started count: a backlog indexed at start says
how old the crawl is, not how fresh the index keeps up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from srcrawl.core.defaults import DEFAULT_INDEX_FOLLOW_SAMPLES


class Freshness:
    """The delays of the last :data:`DEFAULT_INDEX_FOLLOW_SAMPLES` pages made searchable."""

    def __init__(self, since: float, samples: int = DEFAULT_INDEX_FOLLOW_SAMPLES) -> None:
        self.since = since
        self.delays: deque[float] = deque(maxlen=samples)
        self.pages = 0  # pages stored after ``since`` and made searchable

    def add(self, fetched: Iterable[float], committed: float) -> None:
        """Pages fetched at ``fetched`` became searchable at ``committed`` (epoch seconds)."""
        fresh = [max(0.0, committed - at) for at in fetched if at >= self.since]
        self.delays.extend(fresh)
        self.pages += len(fresh)

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile of the recent delays in seconds; None before any page."""
        if not self.delays:
            return None
        return float(np.percentile(np.fromiter(self.delays, float), q))

    def summary(self) -> dict[str, float | int | None]:
        """p50, p95 and max of the recent delays, and the pages counted."""
        p50, p95 = self.percentile(50), self.percentile(95)
        worst = max(self.delays) if self.delays else None
        return {
            "fresh_pages": self.pages,
            "delay_p50_s": None if p50 is None else round(p50, 3),
            "delay_p95_s": None if p95 is None else round(p95, 3),
            "delay_max_s": None if worst is None else round(worst, 3),
        }

    def sentence(self) -> str:
        """``delay p50 1.2 s p95 3.4 s (57 pages)``, or that no page came yet."""
        if not self.delays:
            return "no new page yet"
        return (
            f"delay p50 {self.percentile(50):.1f} s p95 {self.percentile(95):.1f} s "
            f"({self.pages} new pages)"
        )
