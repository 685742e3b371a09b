"""Pages of known Chinese text for the index's kill and lease tests, and the exact
index one indexing of them must leave."""

from __future__ import annotations

from srcrawl.indexer.blocks import term_postings
from srcrawl.indexer.postings import term_fingerprint
from srcrawl.sql.store import Page
from srcrawl.urls import fingerprint

# An index slave process with a short heartbeat, so the master presumes it dead quickly.
SLAVE = """
import sys
from srcrawl.config import Config
from srcrawl.indexer.slave import IndexHandler
from srcrawl.slave.runtime import Slave
cfg = Config.load()
Slave(cfg, [IndexHandler(cfg)], worker_id=sys.argv[1], heartbeat_interval=0.2,
      heartbeat_ttl=1.0, block_timeout=0.2).run()
"""

SENTENCES = "我来到北京清华大学，他来到了网易杭研大厦。"  # 我 他 了: stop words


def expected_terms(i: int, repeat: int) -> dict[str, int]:
    return {"来到": 2 * repeat, "北京": repeat, "清华大学": repeat, "网易": repeat,
            "杭研": repeat, "大厦": repeat, f"page{i}": 1}  # fmt: skip


def store_pages(store, path: str, pages: int, repeat: int) -> list[str]:
    """``pages`` pages of ``repeat`` copies of SENTENCES each; their URLs."""
    urls = [f"http://127.0.0.1:9/{path}/{i}" for i in range(pages)]
    store.put_pages(
        Page(fp=fingerprint(u), url=u, host="127.0.0.1:9", fetched_at=1.0, title="",
             text=SENTENCES * repeat + f" page{i}")
        for i, u in enumerate(urls)
    )  # fmt: skip
    return urls


def assert_indexed_once(store, urls: list[str], repeat: int) -> None:
    """Every page's postings once, none missing, none doubled, no other term."""
    vocab = {t for i in range(len(urls)) for t in expected_terms(i, repeat)}
    names = {term_fingerprint(t): t for t in vocab}
    with store.transaction() as cur:
        cur.execute("SELECT DISTINCT term_id FROM postings")
        ids = [int(i) for (i,) in cur.fetchall()]
    assert set(ids) == set(names)  # no term but the expected ones
    rows = [
        (names[i], fp, tf + boiler + ttf + atf)
        for i in ids
        for fp, tf, _dl, boiler, ttf, _tdl, atf, _adl in term_postings(store, i).tolist()
    ]
    postings = {(t, fp): tf for t, fp, tf in rows}
    assert len(postings) == len(rows)  # no page holds a term twice
    expected = {
        (t, fingerprint(u)): tf
        for i, u in enumerate(urls)
        for t, tf in expected_terms(i, repeat).items()
    }
    assert postings == expected  # every page once, none twice
    df = {names[i]: df for i, df in store.lookup_terms(ids).items()}
    shared = {t: len(urls) for t in expected_terms(0, repeat) if not t.startswith("page")}
    assert df == {**shared, **{f"page{i}": 1 for i in range(len(urls))}}
    assert store.index_stats() == (len(urls), len(urls) * (7 * repeat + 1))
