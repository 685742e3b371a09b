"""The crawl's strategy and scope as one master knows them, shared by the frontier's parts."""

from __future__ import annotations

from srcrawl.queues.crawl_strategy import CrawlStrategy
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
