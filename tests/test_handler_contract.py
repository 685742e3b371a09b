"""The phase handlers have the hooks the slave runtime calls (slave/handler.py), and
each is made from its services, without a Config."""

from __future__ import annotations

import redis

from srcrawl.core.keys import Keys
from srcrawl.indexer.slave import IndexHandler
from srcrawl.pagerank.slave import RankHandler
from srcrawl.slave.crawl import CrawlHandler, warc_output
from srcrawl.slave.handler import (
    Closes,
    CountsMetrics,
    Flushes,
    Forgets,
    KnowsDrained,
    MultiplexedHandler,
    RoutesElsewhere,
)
from srcrawl.slave.page_writer import PageWriter
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import open_store

HOOKS = (Flushes, RoutesElsewhere, Forgets, KnowsDrained, CountsMetrics, Closes)


def _unconnected() -> redis.Redis:
    # a client connects on its first command; these handlers send none here
    return redis.Redis(host="127.0.0.1", port=1)


def test_the_crawl_handler_has_every_hook_and_is_multiplexed(tmp_path) -> None:
    store = open_store(DatabaseURL(kind="sqlite", path=str(tmp_path / "c.db")))
    handler = CrawlHandler(
        _unconnected(),
        Keys("contract"),
        PageWriter(store),
        warc_output(tmp_path / "warc", "contract"),
        threads=2,
    )
    assert all(isinstance(handler, hook) for hook in HOOKS)
    assert isinstance(handler, MultiplexedHandler)
    assert handler.stats()["threads"] == 2 and handler.in_flight() == 0
    handler.close()
    store.close()


def test_the_pagerank_handler_flushes_its_pieces_and_nothing_else() -> None:
    handler = RankHandler(_unconnected(), Keys("contract"))
    assert [hook for hook in HOOKS if isinstance(handler, hook)] == [Flushes]
    assert not isinstance(handler, MultiplexedHandler)


def test_the_index_handler_has_no_hook() -> None:
    # the class alone: making one loads jieba's dictionary
    assert not any(issubclass(IndexHandler, hook) for hook in HOOKS)
    assert not all(hasattr(IndexHandler, m) for m in ("start", "poll", "in_flight"))
