"""The phases a slave can serve, and the handler that serves each.

The table lives here, above the phase packages: the slave runtime knows
only the :class:`~srcrawl.slave.handler.PhaseHandler` contract, and each
package (``slave.crawl``, ``indexer``, ``pagerank``) its own handler. Heavy
imports (jieba, numpy) happen only for the phases a process serves.
"""

from __future__ import annotations

from collections.abc import Callable

from srcrawl.app.roles import SlaveRole
from srcrawl.core.defaults import PHASES
from srcrawl.core.errors import ConfigError
from srcrawl.settings.config import Config
from srcrawl.slave.handler import PhaseHandler


def _crawl(cfg: Config, role: SlaveRole) -> PhaseHandler:
    from srcrawl.slave.crawl import CrawlHandler

    return CrawlHandler.from_config(cfg, threads=role.threads, parser=role.parser)


def _index(cfg: Config, role: SlaveRole) -> PhaseHandler:
    from srcrawl.indexer.slave import IndexHandler

    return IndexHandler.from_config(cfg)


def _pagerank(cfg: Config, role: SlaveRole) -> PhaseHandler:
    from srcrawl.pagerank.slave import RankHandler

    return RankHandler.from_config(cfg)


HANDLERS: dict[str, Callable[[Config, SlaveRole], PhaseHandler]] = {
    "crawl": _crawl,
    "index": _index,
    "pagerank": _pagerank,
}
"""Phase → the factory of its slave handler."""

PRELOAD: dict[str, tuple[str, ...]] = {
    "crawl": (
        "srcrawl.app.child",
        "srcrawl.slave.crawl",
        "srcrawl.slave.runtime",
        "srcrawl.master.crawl_master",
    ),
}
"""Modules a local run of the phase imports once before it forks its children."""


def parse_phases(text: str) -> list[str]:
    """``crawl,index`` → ``["crawl", "index"]``; ConfigError naming an unknown phase."""
    phases = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        raise ConfigError(
            f"--phases: unknown phase {', '.join(unknown) or text!r}; "
            f"choose from {','.join(PHASES)}"
        )
    return phases


def build_handlers(cfg: Config, role: SlaveRole) -> list[PhaseHandler]:
    """One handler per phase the slave serves."""
    return [HANDLERS[phase](cfg, role) for phase in role.phases]
