"""The recrawl schedule: stored pages due again, and the ``<lastmod>`` sitemaps give.

A page fetched goes back on the schedule (``crawl:due``) at the interval its
revisit policy gave it (``CrawlStrategy.plan_revisit``, the change rate of
queues/change_rate.py, worked out by the slave that fetched it). The master
keeps the schedule within the scope and --min/--max-revisit, reads each host's
sitemaps again every --sitemap-every, and judges whether a sitemap's
``<lastmod>`` told a fetch's finding (:meth:`Recrawl.judge_lastmods`).

The ``<lastmod>`` per page fingerprint is kept in one hash
(``Keys.sitemap_lastmod``): fingerprint -> epoch seconds, for the pages of
the sitemaps a slave read; read by whoever schedules fetches again
(:func:`lastmod_of`). Bounded: once it holds ``limit`` fingerprints, only
those already in it are updated; the rest are dropped and counted by the
caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import redis

from srcrawl.core.defaults import DEFAULT_SITEMAP_LASTMOD_MAX
from srcrawl.core.keys import Keys
from srcrawl.core.urls import host_of, origin
from srcrawl.master.frontier import lua
from srcrawl.master.frontier.batch import BatchWork, Requeue, now_ms
from srcrawl.master.frontier.politeness import queue_for
from srcrawl.master.frontier.rules import CrawlRules
from srcrawl.queues.crawl_protocol import FetchTask, sitemap_task


def record_lastmod(
    client: redis.Redis,
    keys: Keys,
    lastmods: Iterable[tuple[int, float]],
    limit: int = DEFAULT_SITEMAP_LASTMOD_MAX,
) -> int:
    """Keep the (fingerprint, lastmod) pairs; how many were dropped (the hash was full)."""
    args: list[int | str] = []
    for fp, when in lastmods:
        args += [fp, repr(float(when))]
    if not args:
        return 0
    script = lua.RECORD_LASTMOD
    keys_ = script.keys_of({"lastmod": keys.sitemap_lastmod})
    return int(client.eval(script.source(), 1, *keys_, *script.args_of({"limit": limit}, args)))


def lastmod_of(client: redis.Redis, keys: Keys, fps: Sequence[int]) -> dict[int, float]:
    """fingerprint -> the ``<lastmod>`` a sitemap gave, for those of ``fps`` that have one."""
    if not fps:
        return {}
    values = client.hmget(keys.sitemap_lastmod, list(fps))
    return {fp: float(v) for fp, v in zip(fps, values, strict=True) if v is not None}


class Recrawl:
    """Puts fetched pages and hosts' sitemap tasks back on the schedule, and reads what
    the sitemaps' ``<lastmod>`` say of them."""

    def __init__(self, rules: CrawlRules, client: redis.Redis, keys: Keys) -> None:
        self.rules = rules
        self.client = client
        self.keys = keys

    def due(self, task: FetchTask, w: BatchWork) -> None:
        """Put a stored page on the recrawl schedule: fetched again ``task.revisit`` seconds
        from now, bypassing the seen test, not the scope (which may have narrowed since)
        nor the host's politeness and robots.txt (its queue and its slave see to those)."""
        if self.rules.scope.reject(task.url, task.depth) is not None:
            w.count("recrawl_out_of_scope")
            return
        strategy = self.rules.strategy
        revisit = strategy.clamp_revisit(task.revisit)
        queue = queue_for(strategy, host_of(task.url), task.fp)
        task = replace(task, revisit=revisit, queue=queue)
        w.batch.due.append(Requeue(task, now_ms() + int(revisit * 1000)))

    def sitemaps_at(self) -> int:
        return now_ms() + int(self.rules.strategy.sitemap_every * 1000)

    def sitemaps_again(self, task: FetchTask, w: BatchWork) -> None:
        """Put a host's sitemap task back on the schedule (unless --no-sitemaps now)."""
        if self.rules.strategy.sitemaps:
            w.batch.due.append(Requeue(replace(task, tries=0, failed=0), self.sitemaps_at()))

    def first_sitemaps(self, task: FetchTask, w: BatchWork) -> None:
        """A host's robots.txt was read: its sitemaps are read again every --sitemap-every
        (one task per origin; the commit keeps the first)."""
        if self.rules.strategy.sitemaps:
            again = sitemap_task(origin(task.url), task.queue)
            w.batch.sitemaps[origin(task.url)] = Requeue(again, self.sitemaps_at())

    def lastmod(self, url: str, fp: int, lastmod: float, w: BatchWork) -> None:
        """A sitemap's ``<lastmod>`` of a page in scope: kept, and the page due now if it
        waits on the schedule since an older fetch (see commit.lua)."""
        if self.rules.scope.reject(url, 0) is None:
            w.lastmods.append((fp, lastmod))
            w.batch.sooner[fp] = int(lastmod * 1000)

    def judge_lastmods(self, w: BatchWork) -> None:
        """Did the sitemap's ``<lastmod>`` tell this fetch's finding (newer than the fetch
        before ⇔ changed)? Then a page found unchanged waits --max-revisit at once (its
        sitemap says when it changes); one found changed keeps the interval its policy
        gave (its lastmod is read only every --sitemap-every, and late). If not, its
        lastmod moves nothing until a fetch finds it right again (a sitemap that lies
        costs no more than none). A lastmod after this fetch tells nothing of it (the
        page is made due now)."""
        if not w.fetched_before:
            return
        batch = w.batch
        lastmods = lastmod_of(self.client, self.keys, list(w.fetched_before))
        lastmods.update(w.lastmods)  # read in this batch: newer
        longest = self.rules.strategy.clamp_revisit(self.rules.strategy.max_revisit)
        for i, due in enumerate(batch.due):
            fp = due.task.fp
            if fp not in w.fetched_before or fp not in lastmods:
                continue
            before, this, changed = w.fetched_before[fp]
            if lastmods[fp] > this:
                continue
            if (lastmods[fp] > before) == changed:
                if not changed:
                    task = replace(due.task, revisit=longest)
                    batch.due[i] = Requeue(task, now_ms() + int(longest * 1000))
                batch.count("sitemap_watched")
            else:
                batch.due[i] = Requeue(replace(due.task, lastmod_wrong=True), due.at)
                batch.count("sitemap_lastmod_wrong")

    def record(self, w: BatchWork) -> None:
        """Keep the batch's lastmods; before the commit, and replay-safe: a batch replayed
        after a failure records them again, alike (not fenced)."""
        if w.lastmods:
            dropped = record_lastmod(self.client, self.keys, w.lastmods)
            if dropped:
                w.count("sitemap_lastmod_dropped", dropped)
