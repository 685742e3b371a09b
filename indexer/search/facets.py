"""A search's counts of its matching pages by language, host and fetch month (facets).

One Tantivy aggregation over the query's matches reads the ``lang``, ``host`` and
``fetched`` fast fields of every matching page (not only those ranked): a terms
aggregation a field, and a range aggregation of the latest FACET_MONTHS calendar
months (UTC). The counts are kept in the commit's memo by the query, as the best
scores are (indexer/search/collect.py): a query asked again counts nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import tantivy

from srcrawl.core.defaults import FACET_MONTHS, FACET_SITES

LANGUAGES_COUNTED = 20
HOSTS_PER_SEGMENT = 10_000
"""Hosts each segment reports before the counts merge: the top hosts are exact while a
segment holds no more hosts than that."""


@dataclass(frozen=True)
class Month:
    """A fetch month and its pages: ``since`` and ``until`` its first and last day."""

    label: str  # YYYY-MM
    since: str
    until: str
    count: int


@dataclass
class Facets:
    """Matching pages counted by language, by host (the top FACET_SITES) and by month."""

    langs: list[tuple[str, int]] = field(default_factory=list)
    sites: list[tuple[str, int]] = field(default_factory=list)
    months: list[Month] = field(default_factory=list)

    def as_json(self) -> dict:
        return {
            "lang": [{"value": v, "count": n} for v, n in self.langs],
            "site": [{"value": v, "count": n} for v, n in self.sites],
            "month": [
                {"value": m.label, "since": m.since, "until": m.until, "count": m.count}
                for m in self.months
            ],
        }


def months(now: datetime, n: int = FACET_MONTHS) -> list[tuple[datetime, datetime]]:
    """The ``n`` calendar months up to ``now``'s (UTC), latest first, as [start, end)."""
    year, month = now.year, now.month
    out = []
    for _ in range(n):
        start = datetime(year, month, 1, tzinfo=UTC)
        nyear, nmonth = (year + 1, 1) if month == 12 else (year, month + 1)
        out.append((start, datetime(nyear, nmonth, 1, tzinfo=UTC)))
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
    return out


def count(searcher: tantivy.Searcher, query: tantivy.Query, now: datetime) -> Facets:
    """The facets of the pages ``query`` matches in ``searcher``."""
    spans = months(now)
    agg = {
        "lang": {"terms": {"field": "lang", "size": LANGUAGES_COUNTED}},
        "host": {
            "terms": {"field": "host", "size": FACET_SITES, "segment_size": HOSTS_PER_SEGMENT}
        },
        "month": {
            "range": {
                "field": "fetched",
                "ranges": [
                    {"key": s.strftime("%Y-%m"), "from": s.timestamp(), "to": e.timestamp()}
                    for s, e in spans
                ],
            }
        },
    }
    out = searcher.aggregate(query, agg)
    facets = Facets(
        langs=[(b["key"], b["doc_count"]) for b in out["lang"]["buckets"]],
        sites=[(b["key"], b["doc_count"]) for b in out["host"]["buckets"]],
    )
    by_key = {b["key"]: b["doc_count"] for b in out["month"]["buckets"]}
    for start, end in spans:
        n = by_key.get(start.strftime("%Y-%m"), 0)
        if n:
            last = datetime.fromtimestamp(end.timestamp() - 1, UTC)
            facets.months.append(
                Month(start.strftime("%Y-%m"), start.date().isoformat(), last.date().isoformat(), n)
            )
    return facets
