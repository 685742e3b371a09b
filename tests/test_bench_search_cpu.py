"""Tantivy alone, the search a search's CPU is compared with (benchmarks/search_cpu.py):
the same search as srcrawl's, on a real index."""

from __future__ import annotations

from pathlib import Path

import pytest
from tantivy_index import index_in_process

from srcrawl.benchmarks.search_cpu import CodeJob, TantivyAlone
from srcrawl.benchmarks.search_instructions import count_instructions
from srcrawl.benchmarks.startup import this_code
from srcrawl.core.urls import fingerprint
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.pages import Page
from srcrawl.sql.store import open_store


def test_tantivy_alone_fills_its_page_from_the_pages_with_some_words(tmp_path: Path) -> None:
    # one page holds both words, three hold one of them, two neither: srcrawl lists the
    # one and then the three, and so must Tantivy alone, each with its snippet, or a
    # query few pages answer whole would be compared with a search that shows less
    texts = {
        "both": "the lighthouse keeper rows out at dawn",
        "light-1": "a lighthouse on the cliff",
        "light-2": "the lighthouse lamp is cleaned weekly",
        "keeper": "the keeper of the keys",
        "none-1": "bread and butter",
        "none-2": "rain on the roof",
    }
    store = open_store(DatabaseURL(kind="sqlite", path=str(tmp_path / "store.db")))
    store.init_schema()
    pages = []
    for name, text in texts.items():
        url = f"http://127.0.0.1:9/{name}"
        pages.append(Page(fp=fingerprint(url), url=url, host="127.0.0.1:9", text=text))
    store.put_pages(pages)
    index_in_process(store, tmp_path / "index")
    alone = TantivyAlone(tmp_path / "index")
    hits = alone.search(alone.query("lighthouse keeper"))
    names = {p.fp: p.url.rsplit("/", 1)[1] for p in pages}
    fps = alone.searcher.fast_field_values("fp", [address for _score, address in hits])
    found = [names[fp] for fp in fps]
    assert found[0] == "both" and sorted(found[1:]) == ["keeper", "light-1", "light-2"]
    # one word: no page with some of the words to fill from
    assert len(alone.search(alone.query("lighthouse"))) == 3


def test_tantivy_alone_makes_chinese_snippets_only_from_words_cut_by_jieba(tmp_path: Path) -> None:
    # Tantivy's analyzer does not cut Chinese into words: its snippet of a Chinese page is
    # empty, the cost of a snippet not made; with ``chinese``, the text is cut by jieba-rs
    # first and the query's words are marked in it, as an engine of the two would
    store = open_store(DatabaseURL(kind="sqlite", path=str(tmp_path / "store.db")))
    store.init_schema()
    url = "http://127.0.0.1:9/zh"
    text = "分布式搜索引擎把网页的正文切成词语，再为每个词语建立倒排索引。"
    store.put_pages([Page(fp=fingerprint(url), url=url, host="127.0.0.1:9", text=text)])
    index_in_process(store, tmp_path / "index")
    for chinese in (False, True):
        alone = TantivyAlone(tmp_path / "index", chinese=chinese)
        assert len(alone.search(alone.query("倒排索引 词语"))) == 1
        (snippet,) = alone.snippets
        assert (len(snippet.highlighted()) >= 2) is chinese  # both words, or none
        assert bool(snippet.fragment()) is chinese


@pytest.mark.slow
def test_a_search_s_instructions_are_counted_for_the_pass_alone(tmp_path: Path) -> None:
    # callgrind counts one pass of srcrawl's searches and one of Tantivy alone's, each in
    # a child of its own, counting only the pass: a search of three small pages costs
    # some hundred thousand to some tens of millions of instructions, not the billions of
    # a process's start-up and its models' load
    store = open_store(DatabaseURL(kind="sqlite", path=str(tmp_path / "store.db")))
    store.init_schema()
    pages = []
    for name, text in {"a": "the lighthouse keeper", "b": "a lighthouse", "c": "bread"}.items():
        url = f"http://127.0.0.1:9/{name}"
        pages.append(Page(fp=fingerprint(url), url=url, host="127.0.0.1:9", text=text))
    store.put_pages(pages)
    index_in_process(store, tmp_path / "index")
    (tmp_path / "warc").mkdir()
    job = CodeJob(this_code(), tmp_path / "store.db", tmp_path / "index", tmp_path / "warc")
    counted = count_instructions(["lighthouse keeper", "bread", "lighthouse"], job, None, tmp_path)
    assert set(counted.per_search) == {"srcrawl", "tantivy"}
    for n in counted.per_search.values():
        assert 1e5 < n < 5e7
    assert "instructions a search (callgrind, one pass): srcrawl " in counted.render()
