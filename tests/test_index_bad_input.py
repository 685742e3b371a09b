"""Hostile documents go through the whole index phase without a crash or a lost page."""

from __future__ import annotations

import random
import threading

import pytest
from tantivy_index import all_pages, index_terms, pages_with

from srcrawl.core.defaults import MAX_TERM_CHARS
from srcrawl.core.urls import fingerprint
from srcrawl.indexer.master import IndexMaster
from srcrawl.indexer.search import Searcher
from srcrawl.indexer.slave import IndexHandler, document_text
from srcrawl.indexer.tokenizer import Tokenizer
from srcrawl.settings.config import Config
from srcrawl.slave.runtime import Slave
from srcrawl.sql.pages import Page

pytestmark = pytest.mark.slow  # every test here runs for more than a second


def make_page(name: str, text: str, title: str = "") -> Page:
    url = f"http://127.0.0.1:9/{name}"
    return Page(
        fp=fingerprint(url), url=url, host="127.0.0.1:9", fetched_at=1.0, title=title, text=text
    )


def hostile_pages() -> dict[str, Page]:
    rng = random.Random(5)
    junk = bytes(rng.randrange(256) for _ in range(20_000)).decode("utf-8", errors="replace")
    megabyte = ("分布式搜索引擎的索引由主节点合并。Slaves tokenize pages. " * 20_000)[:660_000]
    return {
        "empty": make_page("empty", ""),
        "blank": make_page("blank", " \n\t\u3000 ", title="   "),
        "stop": make_page("stop", "the of and 的 了 我们 在 是"),
        "junk": make_page("junk", bytes(range(256)).decode("latin-1") * 40 + junk + "\x00\x01"),
        "long-token": make_page("long-token", "x" * 100_000 + " fine"),
        "megabyte": make_page("megabyte", megabyte + " 结尾词语 zebraword", title="大页面"),
        "scripts": make_page(
            "scripts", "😀🚀 Привет 世界 مرحبا שלום こんにちは 안녕하세요 café NAÏVE ＦＵＬＬ"
        ),
    }


def test_hostile_documents_are_indexed_without_loss(
    store, db_url, redis_url, redis_client, keys, tmp_path
) -> None:
    pages = hostile_pages()
    assert len(pages["megabyte"].text.encode()) > 1_000_000
    store.put_pages(pages.values())
    master_cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    slave_cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    slave = Slave.from_config(slave_cfg, [IndexHandler.from_config(slave_cfg)], block_timeout=0.1)
    thread = threading.Thread(target=slave.run, daemon=True)
    thread.start()
    try:
        report = IndexMaster.from_config(
            master_cfg, batch_pages=2, block_timeout=0.1, merge_wait=0.2
        ).run()
    finally:
        slave.stopping.set()
        thread.join(timeout=30)
    assert report.indexed == len(pages) and report.failed == 0 and slave.failed_batches == 0

    # every page is a document of the index (an empty one too), none twice, and the
    # terms the tokenizer makes of these pages are found in the pages they come from
    index = master_cfg.index_path
    assert all_pages(index) == sorted(p.fp for p in pages.values())
    with store.transaction() as cur:
        cur.execute("SELECT COUNT(*) FROM pages WHERE indexed_at IS NULL")
        assert cur.fetchone()[0] == 0
    tok = Tokenizer()
    terms = {t for p in pages.values() for t in tok.tokens(document_text(p.title, p.text))}
    assert all(0 < len(t) <= MAX_TERM_CHARS and t.isalnum() for t in terms)
    assert {
        "привет",
        "世界",
        "مرحبا",
        "שלום",
        "こんにちは",
        "안녕하세요",
        "café",
        "naïve",
        "full",
    } <= terms
    found = index_terms(index, terms)
    assert set(found) == terms
    assert found["fine"] == {pages["long-token"].fp}  # the 100,000-x token is dropped
    assert pages_with(index, "x" * 64) == set()
    assert found["zebraword"] == {pages["megabyte"].fp}  # the end of a 1 MB page

    searcher = Searcher(store, index)
    assert searcher.search("zebraword 结尾词语").hits[0].url.endswith("/megabyte")
    [hit] = searcher.search("Naïve привет").hits
    assert hit.url.endswith("/scripts") and "«NAÏVE»" in hit.snippet.marked()
    master_cfg.close()
    slave_cfg.close()
