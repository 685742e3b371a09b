"""Which handler serves which phase in ``srcrawl slave start``."""

from __future__ import annotations

from srcrawl.config import Config
from srcrawl.defaults import PHASES
from srcrawl.errors import ConfigError
from srcrawl.slave.handler import PhaseHandler


def parse_phases(text: str) -> list[str]:
    phases = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        raise ConfigError(f"--phases: unknown phase {', '.join(unknown) or text!r}; "
                          f"choose from {','.join(PHASES)}")  # fmt: skip
    return phases


def build_handlers(
    cfg: Config, phases: list[str], *, threads: int, parser: str
) -> list[PhaseHandler]:
    """One handler per phase; heavy imports (jieba, numpy) only for phases served."""
    handlers: list[PhaseHandler] = []
    for phase in phases:
        if phase == "crawl":
            from srcrawl.slave.crawl import CrawlHandler

            handlers.append(CrawlHandler(cfg, threads=threads, parser=parser))
        elif phase == "index":
            from srcrawl.indexer.slave import IndexHandler

            handlers.append(IndexHandler(cfg))
        elif phase == "pagerank":
            from srcrawl.pagerank.slave import RankHandler

            handlers.append(RankHandler(cfg))
    return handlers
