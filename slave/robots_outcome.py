"""The outcome of a task whose request went to its host's robots.txt, or to its sitemaps.

A task whose host has no robots.txt cached fetches it first (its request to
the host); the master then queues the page again for its politeness turn,
or defers it while the host's robots.txt cannot be had. When the crawl asks
for sitemaps, those of a host whose robots.txt answered are read with it
(slave/sitemaps.py), their pages going to the master as seeds in the same
outcome; a sitemap task on a host whose robots.txt is cached reads them alone.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

from srcrawl.core.urls import fingerprint
from srcrawl.queues.crawl_protocol import (
    COULD_NOT_CONNECT,
    UNKNOWN_HOST,
    Deferred,
    FetchTask,
    RobotsFetched,
)
from srcrawl.slave.crawl_tools import CrawlTools
from srcrawl.slave.fetch import FetchResult
from srcrawl.slave.robots import RobotsRules
from srcrawl.slave.sitemaps import SitemapReport, read_host_sitemaps

log = logging.getLogger("srcrawl.slave")

_CURL_CODE = re.compile(r"libcurl error (\d+):")
_CONNECT_REASONS = {6: UNKNOWN_HOST, 7: COULD_NOT_CONNECT}


def failure_reason(result: FetchResult) -> str:
    """A few words on why a request failed, for the user (``could not connect``, ``HTTP 503``)."""
    if result.status:
        return f"HTTP {result.status}"
    code = _CURL_CODE.match(result.detail)
    if code and int(code.group(1)) in _CONNECT_REASONS:
        return _CONNECT_REASONS[int(code.group(1))]
    return (result.error or "failed").replace("_", " ")


@dataclass(frozen=True, slots=True)
class RobotsMiss:
    """A task whose host has no robots.txt cached: fetching it is the task's request."""

    site: str
    task: FetchTask


@dataclass(frozen=True, slots=True)
class SitemapsOnly:
    """A sitemap task on a host whose robots.txt is cached: its sitemaps are the requests."""

    task: FetchTask
    rules: RobotsRules


def robots_outcome(
    task: FetchTask,
    rules: RobotsRules,
    result: FetchResult,
    sitemaps: tuple[SitemapReport, float] | None = None,
) -> bytes:
    """The outcome of a task whose request went to the host's robots.txt (and its
    sitemaps: their report and the last request's time)."""
    if rules.deferred_until is None:
        # the master queues the page again, for its politeness turn
        if sitemaps is None:
            return RobotsFetched(task, result.elapsed_ms, rules.crawl_delay).encode()
        report, fetch_ms = sitemaps
        entries = [(url, fingerprint(url), when) for url, when in report.urls.items()]
        return RobotsFetched(task, fetch_ms, rules.crawl_delay, entries, report.counters()).encode()
    return Deferred(task, rules.deferred_until, failure_reason(result)).encode()


class HostSitemaps:
    """Reads a host's sitemaps as the crawl's strategy asks, politely.

    ``closing`` set: a read in progress sends no more requests.
    """

    def __init__(self, tools: CrawlTools, closing: threading.Event) -> None:
        self.tools = tools
        self.closing = closing

    def wanted(self, rules: RobotsRules, result: FetchResult) -> bool:
        """Read the host's sitemaps: the crawl asks for them and its robots.txt answered."""
        return self.tools.strategy.sitemaps and rules.deferred_until is None and result.status > 0

    def read(self, rules: RobotsRules, result: FetchResult) -> tuple[SitemapReport, float]:
        """The host's sitemaps (see read_host_sitemaps), read now; none when not wanted."""
        fetcher = self.tools.sitemap_fetcher
        if not self.wanted(rules, result) or fetcher is None:
            return SitemapReport(), result.elapsed_ms
        strategy = self.tools.strategy
        return read_host_sitemaps(
            rules,
            fetcher,
            lambda fetch_ms: strategy.politeness_ms(fetch_ms, rules.crawl_delay) / 1000,
            after_ms=result.elapsed_ms,
            stopping=self.closing.is_set,
        )

    def after_robots(self, task: FetchTask, rules: RobotsRules, result: FetchResult) -> bytes:
        """The outcome of the robots.txt request, with the sitemaps read after it."""
        try:
            return robots_outcome(task, rules, result, self.read(rules, result))
        except Exception:  # a bug: the task goes on without the sitemaps rather than be lost
            log.exception("reading the sitemaps of %s failed", rules.origin)
            return robots_outcome(task, rules, result)

    def only(self, step: SitemapsOnly) -> bytes:
        """Read the sitemaps of a host whose robots.txt is cached. The frontier released
        the task at the host's politeness turn: the first request goes at once."""
        first = [True]
        strategy, rules = self.tools.strategy, step.rules

        def wait(fetch_ms: float) -> float:
            if first[0]:
                first[0] = False
                return 0.0
            return strategy.politeness_ms(fetch_ms, rules.crawl_delay) / 1000

        report, fetch_ms = SitemapReport(), 0.0
        fetcher = self.tools.sitemap_fetcher
        if strategy.sitemaps and fetcher is not None:
            report, fetch_ms = read_host_sitemaps(
                rules, fetcher, wait, after_ms=0.0, stopping=self.closing.is_set
            )
        entries = [(url, fingerprint(url), when) for url, when in report.urls.items()]
        return RobotsFetched(
            step.task, fetch_ms, rules.crawl_delay, entries, report.counters()
        ).encode()
