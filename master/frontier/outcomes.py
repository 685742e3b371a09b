"""The slaves' outcomes read into a batch, one handler per kind of nrq message
(queues/crawl_protocol.py): the queue each frees and when, the tasks tried again,
the links judged (admission.py), the pages back on the recrawl schedule (recrawl.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace

from srcrawl.core.defaults import DEFAULT_ROBOTS_TRIES, DEFAULT_ROBOTS_TRIES_UNREACHABLE
from srcrawl.core.errors import EnvelopeError
from srcrawl.core.urls import host_of
from srcrawl.master.frontier.admission import Admission
from srcrawl.master.frontier.batch import BatchWork, Requeue
from srcrawl.master.frontier.politeness import Politeness
from srcrawl.master.frontier.recrawl import Recrawl
from srcrawl.master.frontier.rules import CrawlRules
from srcrawl.queues.crawl_protocol import (
    ERROR_ADDRESS_REFUSED,
    ERROR_ROBOTS_GAVE_UP,
    ERROR_SLAVE,
    UNREACHABLE,
    Deferred,
    Disallowed,
    Fetched,
    Links,
    Retry,
    RobotsFetched,
    Seed,
    TaskError,
    queue_of,
    read_outcome,
    task_of,
)

log = logging.getLogger("srcrawl.master")

REJECTED = "rejected"
"""Crawl counter of nrq messages that are not well formed."""
REJECTED_LINKS = "rejected_links"
"""Crawl counter of link entries that are not well formed (in well-formed messages)."""


class Outcomes:
    """Reads a batch of nrq messages into its :class:`BatchWork`."""

    def __init__(
        self,
        rules: CrawlRules,
        admission: Admission,
        recrawl: Recrawl,
        politeness: Politeness,
        reload_strategy: Callable[[], None],
    ) -> None:
        self.rules = rules
        self.admission = admission
        self.recrawl = recrawl
        self.politeness = politeness
        self.reload_strategy = reload_strategy
        """Called when a seed names a strategy newer than the one in force."""
        self._said_rejected = False
        self._handlers = {
            Seed: self._on_seed,
            Fetched: self._on_fetched,
            RobotsFetched: self._on_robots,
            Retry: politeness.retry,
            Disallowed: self._on_disallowed,
            Deferred: self._on_deferred,
            TaskError: self._on_error,
            Links: self._on_links,
        }

    def read(self, msgs: list[bytes], w: BatchWork) -> None:
        """Every message's outcome, then what the batch as a whole decides: the depths
        improved, the lastmods judged, the links a guard held."""
        for raw in msgs:
            try:
                outcome = read_outcome(raw)
            except EnvelopeError as e:
                self._reject(raw, e, w)
                continue
            self._handlers[type(outcome)](outcome, w)
        self.admission.improve(w)
        self.recrawl.judge_lastmods(w)
        for depth, links in w.held.items():
            w.batch.held.append(Links(links, depth).encode().decode())
            w.count("held_links", len(links))

    def _reject(self, raw: bytes, error: EnvelopeError, w: BatchWork) -> None:
        """Count a malformed message; a queue it names is released, so the crawl goes on."""
        w.count(REJECTED)
        queue = queue_of(raw)
        if queue is not None:
            w.batch.done[queue] = None
            w.batch.lag[queue] = 0
        if not self._said_rejected:
            self._said_rejected = True
            log.warning(
                "rejected a malformed nrq message (%s): %.200r; more are only counted "
                "(crawl counter %r)",
                error,
                raw,
                REJECTED,
            )

    def _on_seed(self, seed: Seed, w: BatchWork) -> None:
        if seed.strategy > self.rules.strategy.version:
            self.reload_strategy()
        if seed.rejected:
            w.count(REJECTED_LINKS, seed.rejected)
        for url, fp in seed.urls:
            self.admission.candidate(url, fp, 0, w)
        for url, fp, depth in seed.again_at():
            self.admission.reseed(url, fp, w, depth)

    def _on_links(self, links: Links, w: BatchWork) -> None:
        """Links another partition's slave or master found for this partition's hosts."""
        if links.rejected:
            w.count(REJECTED_LINKS, links.rejected)
        for url, fp in links.links:
            self.admission.candidate(url, fp, links.depth, w)

    def _on_error(self, error: TaskError, w: BatchWork) -> None:
        """A slave's handler failed on these tasks: release their queues."""
        w.count("slave_errors")
        for raw in error.tasks:
            queue = queue_of(raw)
            if queue is not None:
                w.batch.done[queue] = None
            task = task_of(raw)
            if task is not None and not task.sitemaps:  # its URL ends as a row, its reason named
                w.gave_up.append((task, ERROR_SLAVE))

    def _on_disallowed(self, disallowed: Disallowed, w: BatchWork) -> None:
        w.count("robots_disallowed")
        w.batch.done[disallowed.task.queue] = None
        w.batch.lag[disallowed.task.queue] = 0

    def _on_fetched(self, page: Fetched, w: BatchWork) -> None:
        batch, queue = w.batch, page.task.queue
        self.politeness.learn_limit(page.task, page.crawl_delay, w)
        batch.done[queue] = self.politeness.polite_at(page.fetch_ms, page.crawl_delay)
        # the host answered: its queue counts for the level again, unless it was slow to
        batch.lag[queue] = self.politeness.answer_lag(page.fetch_ms)
        batch.count(
            "recrawled" if page.task.recrawl else "refetched" if page.task.again else "pages"
        )
        self._count_fetch(page, w)
        if page.next is not None:
            before, this = page.task.history, page.next.history
            if before and this and page.changed is not None and self.rules.strategy.sitemaps:
                w.fetched_before[page.task.fp] = (before.at, this.at, page.changed)
            self.recrawl.due(page.next, w)
        # a fetch found nearer while it was in flight: its links take the nearer depth
        depth = self.admission.link_depth(page.task)
        for url, fp in page.links:
            self.admission.candidate(url, fp, depth, w)

    @staticmethod
    def _count_fetch(page: Fetched, w: BatchWork) -> None:
        if page.error:  # a cut-off or failed response is no good page, whatever its status
            w.count("fetch_errors")
            w.count(f"error_{page.error}")
            if page.error == ERROR_ADDRESS_REFUSED:
                w.count("address_refused")
        else:
            w.count(f"status_{page.status // 100}xx" if page.status > 0 else "fetch_errors")
        if page.invalid:
            w.count("invalid_urls", page.invalid)
        if page.rejected:
            w.count(REJECTED_LINKS, page.rejected)
        if page.changed is not None:
            w.count("recrawl_changed" if page.changed else "recrawl_unchanged")

    def _on_robots(self, robots: RobotsFetched, w: BatchWork) -> None:
        """The task fetched robots.txt: the URL itself comes next, at its politeness turn.

        A host whose sitemaps were read gets a task that reads them again every
        --sitemap-every (one per host, on the recrawl schedule): the lastmod they give
        reaches pages whatever else of the host is due. That task's own outcome puts it
        back on the schedule.
        """
        batch, task = w.batch, robots.task
        batch.count("sitemap_rereads" if task.sitemaps else "robots_fetched")
        self.politeness.learn_limit(task, robots.crawl_delay, w)
        batch.errors[host_of(task.url)] = ""
        polite = self.politeness.polite_at(robots.fetch_ms, robots.crawl_delay)
        batch.lag[task.queue] = 0
        if task.sitemaps:
            batch.done[task.queue] = polite
            self.recrawl.sitemaps_again(task, w)
        else:
            batch.retry.append(Requeue(task, polite))
            self.recrawl.first_sitemaps(task, w)
        self._on_sitemap(robots, w)

    def _on_sitemap(self, robots: RobotsFetched, w: BatchWork) -> None:
        """The pages the host's sitemaps named: seeds (depth 0), judged like any link, and
        their ``<lastmod>`` kept for those in scope. A page on the recrawl schedule whose
        ``<lastmod>`` is newer than its last fetch is due now (see commit.lua)."""
        for name, n in robots.sitemap_counts.items():
            w.count(name, n)
        if robots.rejected:
            w.count(REJECTED_LINKS, robots.rejected)
        if not self.rules.strategy.sitemaps:
            return  # a slave that had not seen --no-sitemaps yet
        stats = w.batch.stats
        for url, fp, lastmod in robots.sitemap:
            scheduled = stats.get("scheduled", 0)
            self.admission.candidate(url, fp, 0, w)
            if stats.get("scheduled", 0) > scheduled:
                w.count("sitemap_seeds")
            if lastmod is not None:
                self.recrawl.lastmod(url, fp, lastmod, w)

    def _on_deferred(self, deferred: Deferred, w: BatchWork) -> None:
        """A task whose host's robots.txt could not be had: retry it later, or give it up.

        Only a request the host failed is a try. A task that found the host's
        deferral in the cache (no request: its reason is None) waits for that
        deferral's end and tries nothing: it met a deferral another request
        earned (a task released a moment before the deferral ended, or another
        task of the host), and counting it spent the host's tries on nothing.

        A host that could not even be connected to gets fewer tries than one
        that answered 5xx: it is most likely a mistyped or stopped seed.
        """
        batch = w.batch
        reason = deferred.reason  # only when robots.txt was just fetched, not from the cache
        if not reason:
            batch.count("robots_waited")
            retry_at, lagging = self.politeness.deferred_at(deferred)
            batch.retry.append(Requeue(deferred.task, retry_at))
            batch.lag[deferred.task.queue] = lagging
            return
        task = replace(deferred.task, tries=deferred.task.tries + 1)
        limit = DEFAULT_ROBOTS_TRIES_UNREACHABLE if reason in UNREACHABLE else DEFAULT_ROBOTS_TRIES
        retry_at = None
        if task.tries >= limit:
            if task.sitemaps:  # a sitemap read is no URL of the crawl's: no row
                batch.count("sitemap_robots_gave_up")
            else:
                batch.count("robots_gave_up")
                w.gave_up.append((task, ERROR_ROBOTS_GAVE_UP))
            batch.done[task.queue] = None
            batch.lag[task.queue] = 0
            if task.sitemaps:  # the host may answer again by the next time
                self.recrawl.sitemaps_again(task, w)
        else:
            batch.count("robots_deferred")
            retry_at, lagging = self.politeness.deferred_at(deferred)
            batch.retry.append(Requeue(task, retry_at))
            batch.lag[task.queue] = lagging
        record = {
            "what": "robots.txt",
            "reason": reason,
            "try": task.tries,
            "tries": limit,
            "retry_at": retry_at / 1000 if retry_at else None,
        }
        batch.errors[host_of(task.url)] = json.dumps(record)
