"""Ranked search on a real index (SQLite and MariaDB): BM25, PageRank, AND/OR, bad queries."""

from __future__ import annotations

import math

import pytest

from srcrawl.indexer.blocks import term_postings, term_postings_among
from srcrawl.indexer.merge import merge_index
from srcrawl.indexer.postings import PostingsBatch
from srcrawl.indexer.search import QueryError, Searcher, bm25_idf
from srcrawl.indexer.slave import tokenize_document
from srcrawl.indexer.snippets import make_snippet
from srcrawl.indexer.tokenizer import get_tokenizer
from srcrawl.sql.store import RANK_MEAN, Page
from srcrawl.urls import fingerprint

FILLER = [
    "北京的天气很好，我们去公园散步。Weather report for the city.",
    "上海交通大学的学生在图书馆读书。Students read books in the library.",
    "网易发布了新的游戏。A new game was released today.",
    "分布式系统需要可靠的消息队列。Reliable queues for distributed systems.",
    "搜索引擎对网页进行排序。Search engines rank web pages by links.",
]


def make_page(name: str, text: str, title: str = "", fetched_at: float = 1.0) -> Page:
    url = f"http://127.0.0.1:9/{name}"
    return Page(fp=fingerprint(url), url=url, host="127.0.0.1:9", fetched_at=fetched_at,
                title=title, text=text)  # fmt: skip


def index_pages(store, pages: list[Page]) -> None:
    """Store and index pages through the slave's tokenization and the master's merge."""
    store.put_pages(pages)
    tok = get_tokenizer(None)
    docs = [tokenize_document(tok, p.fp, p.fetched_at, p.title, p.text) for p in pages]
    merge_index(store, PostingsBatch.of(docs), 1.0)


def corpus() -> list[Page]:
    pages = [make_page(f"filler-{i}", FILLER[i % len(FILLER)] + f" 第{i}页") for i in range(40)]
    pages.append(
        make_page("planted", "量子纠缠是一种物理现象。The tesseract appears in 量子纠缠 research.",
                  title="量子纠缠 tesseract")
    )  # fmt: skip
    return pages


def test_a_known_item_query_returns_the_planted_page_first(store) -> None:
    index_pages(store, corpus())
    result = Searcher(store).search("量子纠缠 Tesseract", top=5)
    assert result.mode == "and" and result.terms == ["量子", "纠缠", "tesseract"]
    assert [h.url for h in result.hits] == ["http://127.0.0.1:9/planted"]
    hit = result.hits[0]
    assert hit.title == "量子纠缠 tesseract" and hit.score > 0
    assert "«量子»«纠缠»" in hit.snippet and "«tesseract»" in hit.snippet
    assert result.elapsed_ms > 0 and not result.ranked


def test_bm25f_scores_follow_the_stated_formula(store) -> None:
    index_pages(store, corpus())
    n_docs, body_total, title_total, _anchor_total = store.index_lengths()
    result = Searcher(store).search("tesseract")
    [hit] = result.hits
    tok = get_tokenizer(None)
    page = corpus()[-1]
    body, title = tok.tokens(page.text), tok.tokens(page.title)
    k1 = 1.2
    x = 1.0 * body.count("tesseract") / (0.25 + 0.75 * len(body) / (body_total / n_docs))
    x += 6.0 * title.count("tesseract") / (0.5 + 0.5 * len(title) / (title_total / n_docs))
    idf = math.log(1 + (n_docs - 1 + 0.5) / (1 + 0.5))
    assert hit.score == pytest.approx(idf * x * (k1 + 1) / (x + k1))


def test_idf_never_goes_negative() -> None:
    assert bm25_idf(10, 10) > 0 and bm25_idf(1, 1) > 0
    assert bm25_idf(10, 50) == 0.0
    assert bm25_idf(1000, 1) > bm25_idf(1000, 999) > 0


def test_pagerank_blending_changes_the_order_when_ranks_differ(store) -> None:
    twins = [make_page(f"twin-{i}", "分布式爬虫 crawler 分布式爬虫") for i in range(2)]
    index_pages(store, [*twins, *corpus()])
    plain = Searcher(store).search("分布式 爬虫 crawler")
    assert not plain.ranked and len(plain.hits) == 2
    assert plain.hits[0].score == pytest.approx(plain.hits[1].score)  # a tie, broken by fp
    low, high = plain.hits[1].fp, plain.hits[0].fp
    store.replace_ranks([(low, 0.9), (high, 0.01), *((p.fp, 0.05) for p in corpus())])
    ranked = Searcher(store).search("分布式 爬虫 crawler")
    assert ranked.ranked and [h.fp for h in ranked.hits] == [low, high]
    mean = store.rank_mean()
    bm25 = plain.hits[0].score
    assert ranked.hits[0].score == pytest.approx(bm25 * (1 + 0.5 * 0.9 / (0.9 + mean)))
    assert ranked.hits[1].score == pytest.approx(bm25 * (1 + 0.5 * 0.01 / (0.01 + mean)))
    store.replace_ranks([(low, 0.01), (high, 0.9)])
    assert [h.fp for h in Searcher(store).search("分布式 爬虫").hits] == [high, low]


def test_a_rank_run_between_searches_is_seen_whole(store) -> None:
    """A searcher kept across a rank run blends the new scores with their own mean: the
    scores and the mean are read in one transaction, the mean kept beside the scores."""
    pages = [make_page(f"r{i}", "分布式爬虫 crawler " * (1 + i % 3)) for i in range(6)]
    index_pages(store, [*pages, *corpus()])
    kept = Searcher(store)
    store.replace_ranks([(p.fp, 0.1 * (i + 1)) for i, p in enumerate(pages)])
    assert kept.search("分布式 爬虫").ranked
    assert store.rank_mean() == pytest.approx(0.35)
    store.replace_ranks([(pages[0].fp, 1.0), (pages[1].fp, 3.0)])  # the mean is now 2.0
    with store.rank_snapshot() as ranks:
        assert ranks.mean == 2.0 and ranks.scores([pages[0].fp, pages[5].fp]) == {pages[0].fp: 1.0}
    got, fresh = kept.search("分布式 爬虫"), Searcher(store).search("分布式 爬虫")
    assert [(h.fp, h.score) for h in got.hits] == [(h.fp, h.score) for h in fresh.hits]
    store.replace_ranks([])
    with store.rank_snapshot() as ranks:
        assert ranks.mean is None and ranks.scores([pages[0].fp]) == {}
    assert not kept.search("分布式 爬虫").ranked


def test_a_store_ranked_without_the_mean_in_meta_gets_it_at_open(store, db_url) -> None:
    index_pages(store, corpus())
    store.replace_ranks([(p.fp, 0.5) for p in corpus()])
    with store.transaction() as cur:  # as a rank run of an older version left it
        store._execute(cur, "DELETE FROM meta WHERE k = ?", (RANK_MEAN,))
    assert store.rank_mean() is None
    store.init_schema()  # what opening the store with Config.store() runs
    assert store.rank_mean() == pytest.approx(0.5)
    assert Searcher(store).search("图书馆").ranked


def test_pagerank_cannot_lift_a_much_weaker_match_over_a_strong_one(store) -> None:
    strong = make_page("strong", "量子纠缠 量子纠缠 量子纠缠 量子纠缠")
    weak = make_page("weak", "量子纠缠 " + "其它 内容 很多 " * 30)
    index_pages(store, [strong, weak, *corpus()])
    store.replace_ranks([(weak.fp, 1.0), (strong.fp, 0.0001)])
    hits = Searcher(store).search("量子纠缠").hits
    assert hits[0].fp == strong.fp  # blending raises a score by at most 50%


def test_and_falls_back_to_or_when_no_page_holds_every_word(store) -> None:
    index_pages(store, corpus())
    result = Searcher(store).search("tesseract 图书馆")
    assert result.mode == "or"
    urls = {h.url for h in result.hits}
    assert "http://127.0.0.1:9/planted" in urls and len(urls) > 1
    assert any("every word" in n for n in result.notes)


def test_a_capped_term_still_returns_its_best_pages(store) -> None:
    pages = [make_page(f"p{i}", "排序 " * (1 + i % 7) + "其它 " * (i % 5) + FILLER[i % 5])
             for i in range(60)]  # fmt: skip
    index_pages(store, pages)
    full = Searcher(store).search("排序", top=5)
    capped = Searcher(store, cap=8).search("排序", top=5)
    assert not full.approximate and capped.approximate
    assert [h.fp for h in capped.hits] == [h.fp for h in full.hits]
    assert [h.score for h in capped.hits] == pytest.approx([h.score for h in full.hits])


def test_unusable_queries_raise_a_clear_error(store) -> None:
    index_pages(store, corpus())
    searcher = Searcher(store)
    for query, message in [
        ("", "empty query"),
        ("   \t\n", "empty query"),
        ("the of and 的 了 我们", "no searchable words"),
        ("😀🚀 !!! ——", "no searchable words"),
    ]:
        with pytest.raises(QueryError, match=message):
            searcher.search(query)


def test_a_word_too_long_to_be_indexed_is_named_not_called_a_stop_word(store) -> None:
    index_pages(store, corpus())
    searcher = Searcher(store)
    long = "x" * 100
    with pytest.raises(QueryError, match=r"over 64 characters are not indexed: 'x{20}…'") as e:
        searcher.search(long)
    assert "stop words" not in str(e.value)
    result = searcher.search(f"tesseract {long}")
    assert result.hits[0].url.endswith("/planted") and result.terms == ["tesseract"]
    assert any("left out, words over 64 characters" in n for n in result.notes)
    assert not any("64" in n for n in searcher.search("tesseract " + "y" * 64).notes)


def test_hostile_queries_get_sensible_answers(store) -> None:
    index_pages(store, corpus())
    searcher = Searcher(store)
    pages_before = store.count("pages")
    for query in [
        "'; DROP TABLE pages; --",
        "1 OR 1=1",
        "%' OR term LIKE '%",
        "量子纠缠' UNION SELECT url FROM pages --",
    ]:
        result = searcher.search(query)
        assert all(h.url.startswith("http://127.0.0.1:9/") for h in result.hits)
    assert store.count("pages") == pages_before and store.count("postings") > 0
    assert (
        searcher.search("量子纠缠' UNION SELECT url FROM pages --").hits[0].url.endswith("/planted")
    )
    nothing = searcher.search("zzzunknown 无此词语哈")
    assert nothing.mode == "none" and nothing.hits == [] and nothing.notes


def test_a_10000_character_query_is_cut_and_answered(store) -> None:
    index_pages(store, corpus())
    query = ("tesseract 量子纠缠 " + "词" * 40 + " ") * 300
    assert len(query) > 10_000
    result = Searcher(store).search(query)
    assert result.hits and result.hits[0].url.endswith("/planted")
    assert any("10,000" in n for n in result.notes)
    many = " ".join(f"w{i}" for i in range(100))
    assert len(Searcher(store).search(many).terms) == 32


def test_an_empty_index_is_a_clear_error(store) -> None:
    store.reset_index()  # the store fixture empties tables, not the counters in meta
    with pytest.raises(QueryError, match="index is empty"):
        Searcher(store).search("北京")


def test_snippets_mark_whole_words_only() -> None:
    text = "An engineer builds an engine. 搜索引擎很快。" + "padding " * 100
    snippet = make_snippet(text, ["engine", "搜索引擎"], width=60)
    assert "«engine»" in snippet and "«engineer»" not in snippet and "«搜索引擎»" in snippet
    assert make_snippet("ＦＵＬＬ width", ["full"]) == "«FULL» width"
    assert make_snippet("no match here", ["zzz"]) == "no match here"
    assert make_snippet("x" * 500, ["zzz"], width=10) == "x" * 10 + "…"


def test_postings_read_across_blocks_whole_capped_and_among_pages(store) -> None:
    from srcrawl.indexer.postings import DocPostings, term_fingerprint

    # 12 pages merged in 3 merges (3 blocks); "词" with tf = 1 + i % 4, dl = 10
    pages = [make_page(f"b{i}", f"page {i}") for i in range(12)]
    store.put_pages(pages)
    for k in range(3):
        docs = [DocPostings(p.fp, p.fetched_at, 10, ["词", f"only{i}"], [1 + i % 4, 1])
                for i, p in enumerate(pages) if i % 3 == k]  # fmt: skip
        merge_index(store, PostingsBatch.of(docs), 1.0)
    term_id = term_fingerprint("词")
    df = store.lookup_terms([term_id])[term_id]
    assert df == 12 and store.count("postings") == 3 + 12  # one row per (term, block)
    tf_of = {p.fp: 1 + i % 4 for i, p in enumerate(pages)}
    whole = term_postings(store, term_id)
    assert whole["fp"].tolist() == sorted(tf_of)  # in page order, across blocks
    assert dict(zip(whole["fp"].tolist(), whole["tf"].tolist(), strict=True)) == tf_of
    # the cap keeps the highest weights (tf = 4, then 3), ties broken by fp
    best = term_postings(store, term_id, limit=4, weigh=lambda r: r["tf"] / (r["tf"] + 0.3))
    by_weight = sorted(tf_of, key=lambda fp: (-tf_of[fp], fp))[:4]
    assert best["fp"].tolist() == sorted(by_weight)
    some = [pages[0].fp, pages[4].fp, 12345]
    among = term_postings_among(store, term_id, some)
    assert among["fp"].tolist() == sorted(some[:2])
    assert among["tf"].tolist() == [tf_of[fp] for fp in sorted(some[:2])]
    # re-indexing a page takes it out of its old block, whichever merge it was in
    again = DocPostings(pages[4].fp, pages[4].fetched_at, 3, ["新词"], [3])
    merge_index(store, PostingsBatch.of([again]), 2.0)
    assert store.lookup_terms([term_id]) == {term_id: 11}
    assert pages[4].fp not in term_postings(store, term_id)["fp"].tolist()
    assert store.lookup_terms([term_fingerprint("only4")]) == {}
