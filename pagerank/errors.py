"""What can go wrong while ranking."""

from __future__ import annotations

from srcrawl.errors import SrcrawlError


class PageRankError(SrcrawlError):
    """The graph cannot be ranked, or a slave failed on a shard."""
