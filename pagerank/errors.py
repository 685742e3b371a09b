"""What can go wrong while ranking."""

from __future__ import annotations

from srcrawl.core.errors import SrcrawlError


class PageRankError(SrcrawlError):
    """The graph cannot be ranked, or a slave failed on a shard."""


class RunStateLost(PageRankError):
    """What the run keeps out of the AOF (its graph, shards and rank pieces) is gone: Redis
    restarted, or the keys expired. The master starts the run again."""
