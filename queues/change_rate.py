"""The adaptive revisit policy: each page's change rate, and the interval it earns.

Two steps, both local to one page's outcome (Cho & Garcia-Molina, "Estimating
frequency of change", and "Effective page refresh policies for web
crawlers", ACM TODS 2003):

1. **Estimate** the page's change rate λ from its visits. A visit only tells
   whether the page changed since the last one, not how often, so the naive
   ratio changes / time underestimates fast pages. Cho's estimator corrects
   for that: over ``n`` visits ``I`` seconds apart of which ``X`` found a
   change, λ̂ = −ln((n − X + 0.5) / (n + 0.5)) / I. The counts decay by
   :data:`DECAY` per visit (a memory of about seven visits), so a page whose
   habits change is re-learnt; ``I`` is the mean of the real gaps between
   fetches, lateness included.
2. **Allocate**: with changes as a Poisson process, a page visited every
   ``T`` seconds is fresh a share (1 − e^(−λT)) / (λT) of the time. Spending
   a fixed number of fetches for the most freshness over all pages gives
   each page the interval where one more fetch of it is worth the same
   ``μ`` seconds of freshness as of any other: (1 − (1 + r)·e^(−r)) / λ = μ
   with r = λT (the Lagrange condition). So a page that never changes goes
   to the longest interval, a slow one gets about √(2μ/λ), and a page that
   changes faster than 1/μ is given up (the longest interval): keeping it
   fresh costs more fetches than it pays back.

``μ`` is the one crawl-wide number, and it should be whatever spends the
budget; it is fixed instead at :data:`DEFAULT_REVISIT_FETCH_VALUE` × --revisit
so every decision stays local (no solver, no shared state). The reasoning:
the busiest a page can ask for is about 0.3/μ fetches a second (at r ≈ 2),
i.e. 3 × the uniform rate at 0.1 × --revisit; with most of a web never
changing (about two pages in three in the large studies, e.g. Fetterly et al.
2003) and those pages sent to the longest interval, that spends about the
uniform policy's budget. A web with more changing pages asks for more than
politeness gives: its pages come late, which stretches every interval alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAY = 0.85
"""Weight of the past at each visit (the counts' memory is about 1 / (1 − DECAY) visits)."""

MAX_GROWTH = 2.0
"""An interval grows at most this × per visit: one unchanged visit is weak evidence."""


@dataclass(frozen=True, slots=True)
class ChangeHistory:
    """A page's decayed visit record: a few numbers carried in its schedule entry."""

    visits: float = 0.0
    changes: float = 0.0
    seconds: float = 0.0
    """Sum of the (decayed) gaps between the visits counted."""
    at: float = 0.0
    """Epoch seconds of the last fetch."""

    def observe(self, changed: bool, now: float) -> ChangeHistory:
        """The record after a visit at ``now`` that found the page ``changed`` or not."""
        gap = max(0.0, now - self.at)
        return ChangeHistory(
            DECAY * self.visits + 1.0,
            DECAY * self.changes + (1.0 if changed else 0.0),
            DECAY * self.seconds + gap,
            now,
        )

    def rate(self) -> float:
        """Cho's estimate of changes per second (0: no change seen, or no visit yet)."""
        if self.visits <= 0 or self.seconds <= 0:
            return 0.0
        unchanged = max(self.visits - self.changes, 0.0)
        mean_gap = self.seconds / self.visits
        return -math.log((unchanged + 0.5) / (self.visits + 0.5)) / mean_gap

    def to_list(self) -> list[float]:
        return [self.visits, self.changes, self.seconds, self.at]

    @classmethod
    def from_list(cls, raw: object) -> ChangeHistory | None:
        """The record of a message field; None when it is not four finite numbers ≥ 0."""
        if type(raw) is not list or len(raw) != 4:
            return None
        if not all(type(v) in (int, float) and math.isfinite(v) and v >= 0 for v in raw):
            return None
        visits, changes, seconds, at = (float(v) for v in raw)
        if changes > visits:
            return None
        return cls(visits, changes, seconds, at)


def marginal_value(r: float) -> float:
    """λ × the freshness one more fetch buys a page with r = λT changes per interval."""
    return 1.0 - (1.0 + r) * math.exp(-r)


def optimal_interval(rate: float, value: float) -> float:
    """Seconds between visits of a page changing ``rate`` times a second, when a fetch
    is worth ``value`` seconds of freshness (see the module doc); ``math.inf``: not
    worth visiting for freshness (it never changes, or changes too fast to keep)."""
    if rate <= 0 or rate * value >= 1.0:
        return math.inf
    target = rate * value
    low, high = 0.0, 1.0
    while marginal_value(high) < target:  # marginal_value rises from 0 towards 1
        high *= 2.0
    for _ in range(50):
        mid = (low + high) / 2
        if marginal_value(mid) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2 / rate
