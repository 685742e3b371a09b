"""Results grouped by host, and near-identical hits folded into the first.

One host holding most of the matches would otherwise fill the first page of
results. :class:`HostGroups` walks the best ranked pages (the first GROUP_DEPTH
pages of results' worth, their hosts read in one look-up, nothing else) and fills
the first page with at most PER_HOST of each host; the others are passed over and
counted in ``host_more`` of their host's last hit on the page, which links to
``site:HOST`` with the same words. Only when the hosts passed over are all there is
(a crawl of one or two sites) do their pages fill the rest of the first page, in
rank order, so it is never shorter than the results allow. The pages passed over
then lead the second page, in rank order, and every later page follows on: each
page matched is listed once, the count of pages and results is the ranking's, and
the first page is the same whichever page is asked for. A query that names a
``site:`` is not grouped (its pages are that host's).

Pages with the same body are folded while ranking (indexer/search/collect.py).
On a page of results, a hit whose title is another's and whose snippet says
nearly the same (the same article on two hosts, their menus apart) is folded into
the first as one more similar page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from srcrawl.core.defaults import SIMILAR_URLS
from srcrawl.indexer.search.collect import Scored
from srcrawl.indexer.search.hits import Hit
from srcrawl.indexer.search.query import Units
from srcrawl.sql.store import Store

PER_HOST = 2
"""Hits of one host on the first page of results, while other hosts' pages fill it."""
GROUP_DEPTH = 2
"""Pages of results' worth of ranked pages the first page is chosen from (each more costs
a search about a fifth more CPU: the pages walked, and the second query run more often)."""
HOSTS_KEPT = 200_000
"""Pages whose host a process keeps: a page's fingerprint is its URL's, so its host never
changes, and the pages asked for again and again are those of the common queries."""
SAME_SNIPPET = 0.8
"""Share of words two snippets have in common (of either's) to say the same thing."""


@dataclass
class HostGroups:
    """A search's ``arrange``: the ranked pages with the first page of ``size`` grouped by
    host, cut at ``keep`` (the last result the page asked for needs)."""

    store: Store
    size: int
    keep: int
    per_host: int = PER_HOST
    host_more: dict[int, int] = field(default_factory=dict)
    """fp of a hit of the first page -> pages of its host passed over (among those walked)."""

    def __call__(self, found: list[Scored], units: Units) -> list[Scored]:
        if units.sites or len(found) <= self.size:  # one host's pages, or one page: as ranked
            return found[: self.keep]
        walked = found[: self.size * GROUP_DEPTH]
        hosts = _hosts(self.store, [s.fp for s in walked])
        first: list[int] = []  # indexes into walked, in rank order
        shown: dict[str, int] = {}
        for i, s in enumerate(walked):
            host = hosts.get(s.fp, "")
            if len(first) < self.size and shown.get(host, 0) < self.per_host:
                first.append(i)
                shown[host] = shown.get(host, 0) + 1
        if len(first) < self.size:  # no other host to fill it: the passed over, in rank order
            taken = set(first)
            first += [i for i in range(len(walked)) if i not in taken][: self.size - len(first)]
            first.sort()
        taken = set(first)
        passed = [s for i, s in enumerate(walked) if i not in taken]
        carrier = {hosts.get(walked[i].fp, ""): walked[i] for i in first}  # each host's last
        for s in passed:
            host = hosts.get(s.fp, "")
            if host and host in carrier:  # (a page the store lacks has no host to link to)
                into = carrier[host]
                self.host_more[into.fp] = self.host_more.get(into.fp, 0) + 1 + s.similar
        return ([walked[i] for i in first] + passed + found[len(walked) :])[: self.keep]


_known_hosts: dict[int, str] = {}


def _hosts(store: Store, fps: list[int]) -> dict[int, str]:
    """fp -> host of ``fps``: those not known yet read from the store in one look-up."""
    unknown = [fp for fp in fps if fp not in _known_hosts]
    if unknown:
        if len(_known_hosts) > HOSTS_KEPT:
            _known_hosts.clear()
        _known_hosts.update(store.hosts_of(unknown))
    return {fp: _known_hosts[fp] for fp in fps if fp in _known_hosts}


def _words(text: str) -> set[str]:
    return set(text.lower().replace("…", " ").split())


def _title_key(hit: Hit) -> str:
    return " ".join(hit.title.lower().split())


def _same_words(wa: set[str], wb: set[str]) -> bool:
    if not wa or not wb:
        return wa == wb
    return len(wa & wb) >= SAME_SNIPPET * max(len(wa), len(wb))


def near_identical(a: Hit, b: Hit) -> bool:
    """Same title (case and spacing aside) and snippets sharing SAME_SNIPPET of their words."""
    title = _title_key(a)
    return (
        bool(title)
        and title == _title_key(b)
        and _same_words(_words(a.snippet.text), _words(b.snippet.text))
    )


def fold_near_identical(hits: list[Hit], host_more: dict[int, int]) -> list[Hit]:
    """``hits`` with each near-identical to an earlier one folded into it as similar pages
    (one behind a "more from" link is left listed: its count belongs to its host). Each
    hit's title and words are made once, not once a pair (as near_identical would)."""
    kept: list[tuple[Hit, str, set[str]]] = []
    for hit in hits:
        title, words = _title_key(hit), _words(hit.snippet.text)
        same = None
        if title and not host_more.get(hit.fp):
            same = next((k for k, t, w in kept if t == title and _same_words(w, words)), None)
        if same is None:
            kept.append((hit, title, words))
            continue
        same.similar += 1 + hit.similar
        room = SIMILAR_URLS - len(same.similar_urls)
        same.similar_urls.extend([hit.url, *hit.similar_urls][: max(0, room)])
    return [k for k, _title, _words in kept]
