"""Politeness and retry arithmetic: when a host may be asked again, how long a failed
URL or host backs off, and which frontier queue a URL goes to.

The wait after a request itself (``CrawlStrategy.politeness_ms``) stays with the
strategy: the slaves use it too.
"""

from __future__ import annotations

import math
from dataclasses import replace

from srcrawl.core.defaults import DEFAULT_MAX_RETRY_BACKOFF, QUEUES_PER_LIMIT
from srcrawl.master.frontier.batch import BatchWork, Requeue, now_ms
from srcrawl.master.frontier.rules import CrawlRules
from srcrawl.queues.crawl_protocol import ERROR_CONNECT, Deferred, FetchTask, Retry
from srcrawl.queues.crawl_strategy import CrawlStrategy, spread_host


def retry_ms(strategy: CrawlStrategy, failed: int, retry_after: float | None) -> int:
    """Wait before the next try of a URL whose fetch failed ``failed`` times (≥ 1).

    Exponential back-off, at least the server's Retry-After; both capped.
    """
    wait = max(strategy.retry_backoff * 2 ** (failed - 1), retry_after or 0.0)
    return int(min(wait, DEFAULT_MAX_RETRY_BACKOFF) * 1000)


def queue_for(strategy: CrawlStrategy, host: str, fp: int) -> str:
    """The frontier queue of the URL with fingerprint ``fp`` on ``host``."""
    if strategy.queue_policy == "hash":
        return f"bucket-{fp % strategy.hash_buckets}"
    if strategy.per_host > 1:
        return f"{host}#{fp % (strategy.per_host * QUEUES_PER_LIMIT)}"
    return host


def host_failed(retry: Retry) -> bool:
    """Does the failure say the whole host should be left alone for a while, not one URL?"""
    if retry.error == ERROR_CONNECT:
        return True
    return retry.status == 429 or (retry.status == 503 and retry.retry_after is not None)


class Politeness:
    """When each queue may go again; the limits of hosts spread over several queues."""

    def __init__(self, rules: CrawlRules) -> None:
        self.rules = rules
        self.host_limits: dict[str, int] = {}
        """What the frontier holds as the limit of each host spread over several queues."""

    def polite_at(self, fetch_ms: float, crawl_delay: float | None) -> int:
        """When a host that just answered may be asked again (epoch ms)."""
        return now_ms() + self.rules.strategy.politeness_ms(fetch_ms, crawl_delay)

    def learn_limit(self, task: FetchTask, crawl_delay: float | None, w: BatchWork) -> None:
        """The task's host answered after its robots.txt was read: a host spread over several
        queues may have them all in flight from now on, or only one with a Crawl-delay."""
        host = spread_host(task.queue)
        if host is None:
            return
        limit = self.rules.strategy.host_limit(crawl_delay)
        if self.host_limits.get(host) != limit:
            self.host_limits[host] = w.batch.limits[host] = limit

    def retry(self, retry: Retry, w: BatchWork) -> None:
        """Queue a failed fetch again after a back-off, its host still polite meanwhile.

        A failure of the host (no connection; 429, or 503 with Retry-After: the server
        asks every client to wait) holds its queue for the back-off, the host's other
        queues keeping their politeness. A failure of one URL (a 500, a timeout, a cut-off
        body, while the host may well answer others) holds only that URL: its queue goes
        on at its politeness turn.
        """
        strategy, batch = self.rules.strategy, w.batch
        task = replace(retry.task, failed=retry.task.failed + 1)
        self.learn_limit(task, retry.crawl_delay, w)
        batch.count("fetch_retries")
        batch.count(f"retry_{retry.error or 'status_' + str(retry.status)}")
        polite = strategy.politeness_ms(retry.fetch_ms, retry.crawl_delay)
        wait = max(retry_ms(strategy, task.failed, retry.retry_after), polite)
        now = now_ms()
        if host_failed(retry):
            batch.retry.append(Requeue(task, now + wait, slot=now + polite, held=True))
        else:
            batch.count("url_backoffs")
            batch.backoff.append(Requeue(task, now + wait, slot=now + polite))
        batch.lag[task.queue] = self.answer_lag(retry.fetch_ms)

    def answer_lag(self, fetch_ms: float) -> int:
        """The lag of a queue whose host answered (or timed out) after ``fetch_ms``: 2
        (lagging, slow) when that took --lag-after or longer, so that the host's next slow
        fetch does not hold the level for --lag-after again; else 0, the queue counts for
        the level again."""
        return 2 if fetch_ms >= self.rules.strategy.lag_after * 1000 else 0

    def deferred_at(self, deferred: Deferred) -> tuple[int, int]:
        """When a task whose host's robots.txt could not be had is tried again (ms), and
        whether its queue lags meanwhile (1): a short wait costs the level little, so the
        queue keeps the barrier (exact without bookkeeping); only a host deferred for
        longer stops holding the others."""
        strategy = self.rules.strategy
        wait = strategy.politeness_ms(deferred.fetch_ms, None)
        # rounded up: a task released in the deferral's last millisecond would find it
        # still in force (the slaves compare the exact time)
        retry_at = max(math.ceil(deferred.until * 1000), now_ms() + wait)
        return retry_at, int(retry_at - now_ms() >= strategy.lag_after * 1000)
