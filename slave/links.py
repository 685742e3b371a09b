"""The links a crawl slave sends the master, and their anchor texts.

A fetched page's links go out canonical and fingerprinted; repeats are
dropped by a local CLOCK cache (queues/link_cache.py), which keeps depths,
so a link found again nearer a seed is news for the master. In a
partitioned crawl a link goes to the partition that owns its host
(queues/partitions.py): those of the task's own partition ride on its
outcome, the others are kept until the runtime pushes them, before the
task's ack.
"""

from __future__ import annotations

import threading

from srcrawl.core.defaults import DEFAULT_LINK_CACHE
from srcrawl.core.urls import InvalidURL, canonicalize
from srcrawl.queues.crawl_protocol import FetchTask, Links
from srcrawl.queues.link_cache import ClockCache
from srcrawl.queues.partitions import partition_of_url
from srcrawl.slave.parse import MAX_ANCHOR_CHARS


class LinkEmitter:
    """Which of a page's links to send, and where."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cache = ClockCache(DEFAULT_LINK_CACHE)
        self._routed: dict[int, list[bytes]] = {}
        """Links for other partitions' hosts, by partition, until the acker pushes them."""

    def emit(
        self, task: FetchTask, canonical: dict[str, int], partitions: int
    ) -> list[tuple[str, int]]:
        """The links of ``task``'s page to put in its outcome: those not sent yet (or
        found nearer a seed), of the task's own partition when there are several."""
        with self._lock:
            emit = [
                (c, f) for c, f in canonical.items() if not self.cache.seen_or_add(f, task.depth)
            ]
        if partitions > 1:
            emit = self._route(task, emit, partitions)
        return emit

    def _route(
        self, task: FetchTask, links: list[tuple[str, int]], n: int
    ) -> list[tuple[str, int]]:
        """The links of the task's own partition; the others are kept for the partitions
        that own their hosts (queues/partitions.py), pushed before the task's ack."""
        own = partition_of_url(task.url, n)
        mine: list[tuple[str, int]] = []
        theirs: dict[int, list[tuple[str, int]]] = {}
        for link in links:
            p = partition_of_url(link[0], n)
            if p == own:
                mine.append(link)
            else:
                theirs.setdefault(p, []).append(link)
        if theirs:
            with self._lock:
                for p, entries in theirs.items():
                    self._routed.setdefault(p, []).append(Links(entries, task.depth + 1).encode())
        return mine

    def take_routed(self) -> dict[int, list[bytes]]:
        """The messages for other partitions kept so far (the runtime pushes them)."""
        with self._lock:
            routed, self._routed = self._routed, {}
        return routed

    def forget(self) -> None:
        """Forget the links sent so far: results that carried some were refused."""
        with self._lock:
            self.cache = ClockCache(DEFAULT_LINK_CACHE)

    @property
    def hit_rate(self) -> float:
        return self.cache.hit_rate


def canonical_anchors(canonical: dict[str, int], anchors: dict[str, str]) -> dict[int, str]:
    """Link fingerprint -> anchor text, from the parser's URL -> anchor text.

    Most links are canonical as parsed; the others are canonicalized again to
    find their fingerprint, and the texts of links that meet there are joined.
    """
    out: dict[int, str] = {}
    for url, text in anchors.items():
        fp = canonical.get(url)
        if fp is None:
            try:
                fp = canonical.get(canonicalize(url))
            except InvalidURL:
                continue
            if fp is None:
                continue
        seen = out.get(fp)
        out[fp] = text if seen is None else f"{seen} {text}"[:MAX_ANCHOR_CHARS].rstrip()
    return out
