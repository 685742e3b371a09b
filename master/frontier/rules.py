"""The crawl's strategy and scope as one master knows them, shared by the frontier's parts."""

from __future__ import annotations

import time

import redis

from srcrawl.core.errors import CrawlRestarted, SrcrawlError
from srcrawl.core.keys import Keys
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.crawl_strategy import load as load_strategy
from srcrawl.queues.lease import clear_waiting, holder_id, mark_waiting
from srcrawl.queues.scope import Scope


class CrawlRules:
    """The strategy in force and its scope; :meth:`adopt` moves every holder to a new
    version at once (the admission, the recrawl schedule and the politeness read it here)."""

    def __init__(self, strategy: CrawlStrategy) -> None:
        self.strategy = strategy
        self.scope = Scope(strategy)

    def adopt(self, strategy: CrawlStrategy) -> None:
        self.strategy = strategy
        self.scope = Scope(strategy)

    def reload(self, client: redis.Redis, job_keys: Keys, partitions: int) -> None:
        """Adopt the job's strategy if a newer version was published; CrawlRestarted if
        the crawl now has another number of partitions (a new crawl was started)."""
        strategy = load_strategy(client, job_keys)
        if strategy is not None and strategy.partitions != partitions:
            raise CrawlRestarted(
                f"the job's crawl now has {strategy.partitions} partitions, not "
                f"{partitions}: a new crawl was started; start the master again"
            )
        if strategy is not None and strategy.version != self.strategy.version:
            self.adopt(strategy)


def wait_for_strategy(
    client: redis.Redis, job_keys: Keys, job: str, *, wait: bool
) -> CrawlStrategy:
    """The job's strategy; with ``wait``, waits for one to be published (else a job with
    no crawl is an error)."""
    strategy = load_strategy(client, job_keys)
    holder = holder_id("crawl-master")
    while strategy is None:
        if not wait:
            raise SrcrawlError(
                f"job {job!r} has no crawl: start it with `srcrawl crawl SEED…`, "
                "`srcrawl master start SEED…` or `srcrawl seed URL…`"
            )
        # waiting for seeds is this master's job for now: healthy (srcrawl/app/health.py)
        mark_waiting(client, job_keys.master_lease("crawl"), holder)
        time.sleep(1.0)
        strategy = load_strategy(client, job_keys)
        if strategy is not None:
            clear_waiting(client, job_keys.master_lease("crawl"))
    return strategy
