"""Scope and trap filters: which canonical URLs a crawl may fetch."""

from __future__ import annotations

import re
from collections import Counter

from srcrawl.queues.crawl_strategy import CrawlStrategy

# Reasons a URL is dropped, as counted in the crawl stats.
OUT_OF_SCOPE = "out_of_scope"
DENIED = "denied"
TOO_LONG = "too_long"
TRAP = "trap"
TOO_DEEP = "too_deep"


class Scope:
    """Decides, per canonical URL, whether it is crawled; cheap enough for the hot path."""

    def __init__(self, strategy: CrawlStrategy) -> None:
        self.strategy = strategy
        self.hosts = frozenset(strategy.seed_hosts)
        self.domains = tuple(d.lower().lstrip(".") for d in strategy.allow_domains)
        self.allow = [re.compile(p) for p in strategy.allow]
        self.deny = [re.compile(p) for p in strategy.deny]
        self._host_cache: dict[str, bool] = {}

    def host_in_scope(self, host: str) -> bool:
        """Whether ``host[:port]`` (canonical) is one of the seeds' or in an allowed domain."""
        ok = self._host_cache.get(host)
        if ok is None:
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            ok = host in self.hosts or any(
                name == d or name.endswith("." + d) for d in self.domains
            )
            if len(self._host_cache) < 100_000:
                self._host_cache[host] = ok
        return ok

    def reject(self, url: str, depth: int) -> str | None:
        """None if ``url`` at ``depth`` may be crawled, else the reason it may not."""
        s = self.strategy
        if depth > s.max_depth:
            return TOO_DEEP
        if len(url) > s.max_url_length:
            return TOO_LONG
        if not self.host_in_scope(url.split("/", 3)[2]):
            return OUT_OF_SCOPE
        if self.allow and not any(p.search(url) for p in self.allow):
            return OUT_OF_SCOPE
        if self.deny and any(p.search(url) for p in self.deny):
            return DENIED
        if _repeats_a_segment(url, s.max_repeated_segments):
            return TRAP
        return None


def _repeats_a_segment(url: str, limit: int) -> bool:
    if url.count("/") <= limit + 2:  # "scheme://" has two: too few segments to repeat
        return False
    start = url.find("/", url.find("//") + 2)
    if start < 0:
        return False
    end = url.find("?", start)
    path = url[start + 1 : end if end >= 0 else None]
    if path.count("/") < limit:
        return False
    counts = Counter(seg for seg in path.split("/") if seg)
    return bool(counts) and max(counts.values()) > limit
