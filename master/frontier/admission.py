"""Admission: whether a link becomes a new task of the frontier.

A link (canonical, fingerprinted by its sender) is judged in order: held while a
guard holds admission (master/guards.py); a repeat of a link just judged is a
duplicate; then the scope, the partition that owns its host (another's links
are forwarded to it), the per-host cap and the seen test. A duplicate found
behind the level may be a shorter path to a URL scheduled deeper: it is looked
up in the depth record once the batch is read (:meth:`Admission.improve`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

import redis

from srcrawl.core.defaults import DEFAULT_SEEN_CACHE
from srcrawl.core.keys import Keys
from srcrawl.core.urls import host_of
from srcrawl.master.frontier.batch import BatchWork, Improvement
from srcrawl.master.frontier.host_queues import Frontier
from srcrawl.master.frontier.politeness import queue_for
from srcrawl.master.frontier.rules import CrawlRules
from srcrawl.master.frontier.seen import SeenSet
from srcrawl.master.guards import CrawlGuards
from srcrawl.queues.crawl_protocol import FetchTask, Links
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.link_cache import ClockCache
from srcrawl.queues.partitions import partition_of_host

log = logging.getLogger("srcrawl.master")

HELD_MOVED_PER_ROUND = 10_000
"""Held link messages moved back to nrq per housekeeping round once a guard let go."""


class Admission:
    """Judges links into new tasks; keeps what that needs between batches (the seen set,
    the hosts' page counts, the depths improved)."""

    def __init__(
        self,
        rules: CrawlRules,
        seen: SeenSet,
        frontier: Frontier,
        *,
        partition: int,
        partitions: int,
        holding: Callable[[], bool],
    ) -> None:
        self.rules = rules
        self.seen = seen
        self.frontier = frontier
        self.partition = partition
        self.partitions = partitions
        self.holding = holding
        """Whether a guard holds admission now."""
        self.recent = ClockCache(DEFAULT_SEEN_CACHE)
        self.host_pages: dict[str, int] = {}
        self.improved: dict[int, int] = {}
        """fp → depth of the URLs found nearer than first scheduled (Redis ``improved``): the
        links of a deeper fetch still in flight when it was found take the nearer depth."""

    def load(self) -> int:
        """Read back what Redis holds (the seen set, host page counts, depths improved);
        return the seen journal's entries replayed."""
        replayed = self.seen.load()
        raw = self.frontier.client.hgetall(self.frontier.keys.crawl_host_pages)
        self.host_pages = {k.decode(): int(v) for k, v in raw.items()}
        self.improved = dict(self.frontier.improved_depths())
        return replayed

    def link_depth(self, task: FetchTask) -> int:
        """The depth of the links of a fetch: one below its own, or below the nearer depth
        it was found at while in flight."""
        return min(task.depth, self.improved.get(task.fp, task.depth)) + 1

    def candidate(self, url: str, fp: int, depth: int, w: BatchWork) -> None:
        """Judge one link (canonical, fingerprinted by its sender): schedule it or count why not."""
        if self.holding():  # judged once the guard lets go
            w.held.setdefault(depth, []).append((url, fp))
            return
        # A link found behind the current level (on a page of a lagging queue, or a late
        # host's sitemap seed) may be a shorter path to a URL scheduled deeper: see Frontier.
        behind = w.recorded and depth <= w.level
        # most links are repeats: one already judged seen is a duplicate whatever its depth
        if fp in self.recent and not behind:
            self.recent.seen_or_add(fp)
            w.count("duplicates")
            return
        reason = self.rules.scope.reject(url, depth)
        if reason is not None:
            w.count(reason)
            return
        host = host_of(url)
        if self.partitions > 1:
            owner = partition_of_host(host, self.partitions)
            if owner != self.partition:  # not this partition's host: its owner judges it
                w.forward.setdefault(owner, []).append((url, fp, depth))
                return
        cap = self.rules.strategy.max_pages_per_host
        if cap and self.host_pages.get(host, 0) >= cap:
            w.count("host_cap")
            return
        is_new = self.seen.add(fp)
        self.recent.seen_or_add(fp)
        queue = queue_for(self.rules.strategy, host, fp)
        if not is_new:
            w.count("duplicates")
            if behind and depth < getattr(w.checks.get(fp), "depth", depth + 1):
                w.checks[fp] = FetchTask(url, fp, depth, queue, again=True)
            return
        self.schedule(FetchTask(url, fp, depth, queue), host, w)

    def reseed(self, url: str, fp: int, w: BatchWork, depth: int = 0) -> None:
        """A seed given again for a URL whose fetch the address policy refused, now that the
        crawl may reach it, or a stored page of a host fetched again at its ``depth``:
        fetched once more although the seen test knows it."""
        reason = self.rules.scope.reject(url, depth)
        if reason is not None:
            w.count(reason)
            return
        host = host_of(url)
        self.seen.add(fp)
        self.recent.seen_or_add(fp)
        w.count("reseeded")
        strategy = self.rules.strategy
        queue = queue_for(strategy, host, fp)
        task = FetchTask(url, fp, depth, queue, again=True, strategy=strategy.version)
        self.schedule(task, host, w)

    def schedule(self, task: FetchTask, host: str, w: BatchWork) -> None:
        batch = w.batch
        if self.rules.strategy.max_pages_per_host:
            self.host_pages[host] = self.host_pages.get(host, 0) + 1
            batch.hosts[host] = batch.hosts.get(host, 0) + 1
        if task.depth > 0:  # a seed is never found nearer
            batch.depths[task.fp] = task.depth
            w.scheduled[task.fp] = task
        batch.count("scheduled")
        if task.depth <= w.level:
            batch.now.append(task)
        else:
            batch.next.append(task)

    def improve(self, w: BatchWork) -> None:
        """URLs found again by a shorter path than the depth they were scheduled at: record
        the new depth and fetch them at it, so that their links get it too (the commit
        replaces a deeper task still queued, see Frontier)."""
        if not w.checks:
            return
        fps = [fp for fp in w.checks if fp not in w.scheduled]
        recorded = dict(zip(fps, self.frontier.recorded_depths(fps), strict=True))
        for fp, task in w.checks.items():
            first = w.scheduled.get(fp)
            was = first.depth if first is not None else recorded.get(fp)
            if was is None or was <= task.depth:
                continue
            w.count("depth_improved")
            if first is not None:  # scheduled by this very batch: schedule it nearer instead
                w.count("depth_improved_queued")
                self._reschedule(first, replace(task, again=False), w)
                continue
            w.batch.improved[fp] = Improvement(task, was)

    def _reschedule(self, first: FetchTask, task: FetchTask, w: BatchWork) -> None:
        """Put ``task`` in the place of ``first``, a task of this batch's new URLs."""
        tasks = w.batch.now if first.depth <= w.level else w.batch.next
        tasks.remove(first)
        w.batch.now.append(task)
        w.batch.depths[task.fp] = task.depth
        w.scheduled[task.fp] = task

    def committed(self, w: BatchWork) -> None:
        """The batch is committed: its improved depths hold for the links still to come."""
        self.improved.update((fp, m.task.depth) for fp, m in w.batch.improved.items())

    def forward(self, client: redis.Redis, job_keys: Keys, w: BatchWork) -> None:
        """Send the batch's links for other partitions' hosts to their owners: before the
        commit that acks them, and replay-safe (not fenced): a batch replayed after a failure
        forwards its links again, and the owners' seen tests drop the repeats."""
        if w.forward:
            forward_links(client, job_keys, self.partitions, w.forward)
            w.count("links_forwarded", sum(len(v) for v in w.forward.values()))


class HeldLinks:
    """Admission held by a guard (master/guards.py): the links judged meanwhile wait in
    ``crawl_held``, and go back to nrq once it lets go."""

    def __init__(self, guards: CrawlGuards, client: redis.Redis, keys: Keys, nrq_key: str) -> None:
        self.guards = guards
        self.client = client
        self.keys = keys
        self.nrq_key = nrq_key

    def held(self) -> bool:
        """A guard holds admission now."""
        return self.guards.state.admission_held

    def pending(self) -> bool:
        """Links wait to be admitted: the depth level may not end before they are judged."""
        return self.guards.state.admission_held or bool(self.client.llen(self.keys.crawl_held))

    def check(self, strategy: CrawlStrategy) -> None:
        """Look at disk and Redis memory; once admission is free again, the links held
        meanwhile go back to nrq (each move is atomic: none is lost or doubled; not
        fenced, a stale master's moves are moves all the same)."""
        state = self.guards.check(strategy.min_free_disk, strategy.max_redis_memory)
        if state.admission_held:
            return
        # a bounded share per round: the next rounds move the rest
        held = min(self.client.llen(self.keys.crawl_held), HELD_MOVED_PER_ROUND)
        if held:
            pipe = self.client.pipeline(transaction=False)
            for _ in range(held):
                pipe.lmove(self.keys.crawl_held, self.nrq_key, "LEFT", "RIGHT")
            pipe.execute()
            log.info("%d held link messages back in nrq", held)


def forward_links(
    client: redis.Redis,
    job_keys: Keys,
    partitions: int,
    forward: dict[int, list[tuple[str, int, int]]],
) -> None:
    """Push links to the nrq of the partitions that own their hosts, one message per
    partition and depth: ``forward`` maps partition -> (url, fp, depth)."""
    for p, entries in forward.items():
        by_depth: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for url, fp, depth in entries:
            by_depth[depth].append((url, fp))
        messages = [Links(links, depth).encode() for depth, links in sorted(by_depth.items())]
        client.rpush(job_keys.partition(p, partitions).nrq("crawl"), *messages)
