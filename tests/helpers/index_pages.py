"""Pages of known Chinese text for the index's kill and lease tests, and the exact
index one indexing of them must leave."""

from __future__ import annotations

from pathlib import Path

from srcrawl.core.urls import fingerprint
from srcrawl.sql.pages import Page

# An index slave process with a short heartbeat, so the master presumes it dead quickly.
SLAVE = """
import sys
from srcrawl.settings.config import Config
from srcrawl.indexer.slave import IndexHandler
from srcrawl.slave.runtime import Slave
cfg = Config.load()
Slave.from_config(cfg, [IndexHandler.from_config(cfg)], worker_id=sys.argv[1],
                  heartbeat_interval=0.2, heartbeat_ttl=1.0, block_timeout=0.2).run()
"""

FILLER = [
    "北京的天气很好，我们去公园散步。Weather report for the city.",
    "上海交通大学的学生在图书馆读书。Students read books in the library.",
    "网易发布了新的游戏。A new game was released today.",
    "分布式系统需要可靠的消息队列。Reliable queues for distributed systems.",
    "搜索引擎对网页进行排序。Search engines rank web pages by links.",
]
"""Five pages' worth of mixed Chinese and English text, for pages no query looks for."""

SENTENCES = "我来到北京清华大学，他来到了网易杭研大厦。"  # 我 他 了: stop words


def expected_terms(i: int, repeat: int) -> dict[str, int]:
    return {
        "来到": 2 * repeat,
        "北京": repeat,
        "清华大学": repeat,
        "网易": repeat,
        "杭研": repeat,
        "大厦": repeat,
        f"page{i}": 1,
    }


def store_pages(store, path: str, pages: int, repeat: int) -> list[str]:
    """``pages`` pages of ``repeat`` copies of SENTENCES each; their URLs."""
    urls = [f"http://127.0.0.1:9/{path}/{i}" for i in range(pages)]
    store.put_pages(
        Page(
            fp=fingerprint(u),
            url=u,
            host="127.0.0.1:9",
            fetched_at=1.0,
            title="",
            text=SENTENCES * repeat + f" page{i}",
        )
        for i, u in enumerate(urls)
    )
    return urls


def assert_indexed_once(store, index: Path, urls: list[str], repeat: int) -> None:
    """Every page's document once, none missing, none doubled, each term in its pages."""
    from tantivy_index import all_pages, index_terms

    fps = [fingerprint(u) for u in urls]
    assert all_pages(index) == sorted(fps)  # every page once, none twice
    vocab = {t for i in range(len(urls)) for t in expected_terms(i, repeat)}
    expected = {t: set(fps) for t in expected_terms(0, repeat) if not t.startswith("page")}
    expected |= {f"page{i}": {fp} for i, fp in enumerate(fps)}
    assert index_terms(index, vocab | {"我", "他"}) == expected
    assert not store.unindexed_pages(None, 1)
