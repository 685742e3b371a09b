"""Ranked search on a real Tantivy index (pages in SQLite and MariaDB): every word
first then most, phrases, exclusions, sites, stemming, identifiers, PageRank as a
bounded prior, duplicates collapsed, snippets, bad queries."""

from __future__ import annotations

import pytest
from index_pages import FILLER
from tantivy_index import index_in_process, schema_before_exact, schema_before_stored_text

from srcrawl.core.urls import fingerprint
from srcrawl.indexer.search import QueryError, Searcher
from srcrawl.indexer.search.snippets import Snippet, make_snippet
from srcrawl.indexer.search.weights import RankWeights
from srcrawl.sql.pages import Page
from srcrawl.sql.ranks import RANK_MEAN


def make_page(
    name: str, text: str, title: str = "", fetched_at: float = 1.0, host: str = "127.0.0.1:9"
) -> Page:
    url = f"http://{host}/{name}"
    return Page(
        fp=fingerprint(url), url=url, host=host, fetched_at=fetched_at, title=title, text=text
    )


@pytest.fixture
def index(tmp_path):
    return tmp_path / "index"


def index_pages(store, index, pages: list[Page]) -> Searcher:
    """Store and index pages through the slave's tokenization and the master's writer; a
    searcher of them."""
    store.put_pages(pages)
    index_in_process(store, index)
    return Searcher(store, index)


def corpus() -> list[Page]:
    pages = [make_page(f"filler-{i}", FILLER[i % len(FILLER)] + f" 第{i}页") for i in range(40)]
    pages.append(
        make_page(
            "planted",
            "量子纠缠是一种物理现象。The tesseract appears in 量子纠缠 research.",
            title="量子纠缠 tesseract",
        )
    )
    return pages


def test_a_known_item_query_returns_the_planted_page_first(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    result = searcher.search("量子纠缠 Tesseract", top=5)
    assert result.mode == "and" and result.terms == ["量子", "纠缠", "tesseract"]
    assert [h.url for h in result.hits] == ["http://127.0.0.1:9/planted"]
    hit = result.hits[0]
    assert hit.title == "量子纠缠 tesseract" and hit.score > 0
    snippet = hit.snippet.marked()
    assert "«量子»«纠缠»" in snippet and "«tesseract»" in snippet
    assert result.elapsed_ms > 0 and not result.ranked


def test_pages_with_every_word_come_first_then_pages_with_most(store, index) -> None:
    pages = [
        make_page("all", "vacuum autovacuum tuning " + FILLER[0]),
        make_page("two", "vacuum autovacuum " * 5 + FILLER[1]),  # more often, one word short
        make_page("one", "tuning " * 8),
        *corpus(),
    ]
    result = index_pages(store, index, pages).search("vacuum autovacuum tuning")
    # one page with every word; the count is that of the list, which holds the others too
    assert result.mode == "and" and result.every == 1 and result.matches == len(result.hits)
    # "two" scores more by BM25 alone (its words five times over), but lacks a word
    assert [h.url.rsplit("/", 1)[1] for h in result.hits] == ["all", "two", "one"]


def test_a_page_short_of_a_word_passes_only_when_it_scores_far_more(store, index) -> None:
    # a table of contents holds every word once among many titles; the section that
    # answers names its topic throughout but says "move" where the query says "migrate"
    titles = " ".join(f"chapter{i} section{i}" for i in range(150))
    toc = make_page("toc", f"contents {titles} migrate iptables nftables", title="Contents")
    answer = make_page(
        "answer",
        "nftables replaces iptables: move the iptables rules to "
        "nftables with iptables-translate. " * 3,
        title="nftables",
    )
    searcher = index_pages(store, index, [toc, answer, *corpus()])
    result = searcher.search("migrate iptables nftables")
    assert result.mode == "and" and result.every == 1  # only the toc has every word
    assert [h.url.rsplit("/", 1)[1] for h in result.hits] == ["answer", "toc"]
    # the share is what lets it pass: counted at a tenth (not rising with the words), it
    # stays below
    low = Searcher(store, index, weights=RankWeights(some_words=0.1, some_words_rise=0.0)).search(
        "migrate iptables nftables"
    )
    assert [h.url.rsplit("/", 1)[1] for h in low.hits] == ["toc", "answer"]


def test_and_falls_back_to_pages_with_some_words(store, index) -> None:
    result = index_pages(store, index, corpus()).search("tesseract 图书馆")
    assert result.mode == "or"
    urls = {h.url for h in result.hits}
    assert "http://127.0.0.1:9/planted" in urls and len(urls) > 1
    assert any("every word" in n for n in result.notes)


def test_english_words_are_stemmed(store, index) -> None:
    pages = [make_page("split", "Splitting a large table into partitions."), *corpus()]
    searcher = index_pages(store, index, pages)
    result = searcher.search("split tables partition")
    assert result.mode == "and" and result.hits[0].url.endswith("/split")
    assert "«table»" in result.hits[0].snippet.marked()


def test_a_word_as_typed_counts_beside_its_stem(store, index, tmp_path, monkeypatch) -> None:
    # "difference" and "different" are one stem: only the words as written tell them apart;
    # half the text's weight goes to the word as typed, so a variant counts half
    pages = [
        make_page("typed", "the difference between two branches " + FILLER[0]),
        make_page("variant", "the different between two branches " + FILLER[0]),
        *corpus(),
    ]
    index_pages(store, index, pages)
    # (the default weighs it 0.5; what a query means, which lifts scores, left out)
    exact = Searcher(store, index, weights=RankWeights(meaning=0.0))
    stemmed = Searcher(store, index, weights=RankWeights(exact=0.0, meaning=0.0))

    def scores(searcher: Searcher, query: str) -> dict[str, float]:
        return {h.url.rsplit("/", 1)[1]: h.score for h in searcher.search(query).hits}

    alone = scores(stemmed, "difference branches")
    assert alone["typed"] == pytest.approx(alone["variant"])
    both = scores(exact, "difference branches")
    assert both["typed"] > both["variant"] and both["variant"] < alone["variant"]
    # a Chinese word is as written already: its score does not change
    assert scores(exact, "量子纠缠") == pytest.approx(scores(stemmed, "量子纠缠"))
    # an index built before the words as written is searched by its stems alone
    old = tmp_path / "old-index"
    monkeypatch.setattr("srcrawl.indexer.engine.schema", schema_before_exact)
    index_in_process(store, old, [p.fp for p in pages[1:]])
    monkeypatch.undo()
    index_in_process(store, old, [pages[0].fp])  # written to since, as it is
    old_exact = Searcher(store, old, weights=RankWeights(exact=0.5, meaning=0.0))
    assert not old_exact.reader.has_exact
    assert scores(old_exact, "difference branches") == pytest.approx(alone)


def test_srcrawl_index_says_what_an_older_index_lacks(store, tmp_path, monkeypatch, capsys) -> None:
    from types import SimpleNamespace

    from srcrawl.indexer.commands import _note_built_before
    from srcrawl.indexer.engine import built_before, open_index

    store.put_pages(corpus())
    fps = [p.fp for p in corpus()]
    for name, old_schema in (("exact", schema_before_exact), ("text", schema_before_stored_text)):
        monkeypatch.setattr("srcrawl.indexer.engine.schema", old_schema)
        index_in_process(store, tmp_path / name, fps)
        monkeypatch.undo()
    index_in_process(store, tmp_path / "now", fps)
    assert built_before(open_index(tmp_path / "now")) == []
    assert built_before(open_index(tmp_path / "exact")) == [
        "words as typed (a word's other forms count as much)",
        "pages' vectors (a query's meaning does not count)",
    ]
    assert len(built_before(open_index(tmp_path / "text"))) == 4
    _note_built_before(SimpleNamespace(index_url=None, index_work_path=tmp_path / "exact"))
    assert capsys.readouterr().err == (
        f"note: the index at {tmp_path / 'exact'} was built before words as typed (a word's "
        "other forms count as much); pages' vectors (a query's meaning does not count): "
        "`srcrawl index --rebuild` adds them\n"
    )
    for quiet in ("now", "none-yet"):  # an index of today, or none: nothing said
        _note_built_before(SimpleNamespace(index_url=None, index_work_path=tmp_path / quiet))
        assert capsys.readouterr().err == ""


def test_phrases_exclusions_and_sites(store, index) -> None:
    pages = [
        make_page("ab", "the quick brown fox jumps", host="docs.example.com"),
        make_page("ba", "brown quick fox", host="www.example.com"),
        make_page("other", "quick brown fox", host="other.org"),
        *corpus(),
    ]
    searcher = index_pages(store, index, pages)

    def names(query: str) -> set[str]:
        return {h.url.rsplit("/", 1)[1] for h in searcher.search(query).hits}

    assert names('"quick brown"') == {"ab", "other"}
    assert names("quick -jumps") == {"ba", "other"}
    assert names('fox -"brown quick"') == {"ab", "other"}
    assert names("fox site:example.com") == {"ab", "ba"}
    assert names("fox site:docs.example.com") == {"ab"}
    assert names("fox -site:example.com") == {"other"}
    assert names("site:other.org") == {"other"}
    # a phrase is required even where the words are not all: the fill keeps it
    assert names('"quick brown" nosuchword') == {"ab", "other"}


@pytest.mark.parametrize(
    ("typed", "words", "excluded"),
    [
        ("re-run the failed tests --lf", ["re-run", "the", "failed", "tests", "--lf"], []),
        ("--strict-markers", ["--strict-markers"], []),
        ("stop at the first failure -x", ["stop", "at", "the", "first", "failure", "-x"], []),
        ("-k", ["-k"], []),
        ("report -r -W", ["report", "-r", "-W"], []),
        ("-9", ["-9"], []),
        ("vacuum -full", ["vacuum"], ["full"]),
        ("-full", [], ["full"]),
        ("markers -xfail", ["markers"], ["xfail"]),
        ("数据库 -连接", ["数据库"], ["连接"]),
        ("数据库 -库", ["数据库"], ["库"]),  # a Chinese word, however short, is a word
        ("a - b", ["a", "-", "b"], []),
    ],
)
def test_an_option_name_is_searched_and_a_dashed_word_left_out(typed, words, excluded) -> None:
    from srcrawl.indexer.search.query import parse

    parsed = parse(typed)
    assert (parsed.words, parsed.excluded) == (words, excluded)


def test_pages_naming_an_option_are_found_by_it(store, index) -> None:
    pages = [
        make_page("cache", "Use --lf to re-run only the tests that failed at the last run."),
        make_page("failures", "Stop after the first failure with -x, or drop to pdb."),
        make_page("other", "Running tests: the last run of the failed tests is kept."),
        *corpus(),
    ]
    searcher = index_pages(store, index, pages)

    def names(query: str) -> list[str]:
        return [h.url.rsplit("/", 1)[1] for h in searcher.search(query).hits]

    assert names("re-run failed --lf")[0] == "cache"
    assert names("-x") == ["failures"]
    assert "«x»" in searcher.search("first failure -x").hits[0].snippet.marked()
    assert names("failed tests -lf") == ["other"]  # a dashed word is still left out


def test_identifiers_are_found_whole_and_in_parts(store, index) -> None:
    pages = [
        make_page("hba", "Edit pg_hba.conf to allow the client.", title="Client auth"),
        make_page("dump", "Run pg_dump nightly.", title="Backup"),
        make_page("parts", "The conf of pg and the hba module.", title="Mixed"),
        *corpus(),
    ]
    searcher = index_pages(store, index, pages)
    hits = searcher.search("pg_hba.conf").hits
    assert [h.url.rsplit("/", 1)[1] for h in hits] == ["hba"]
    assert "«pg_hba.conf»" in hits[0].snippet.marked()
    assert searcher.search("pg_dump").hits[0].url.endswith("/dump")
    assert searcher.search("dump").hits[0].url.endswith("/dump")  # a part alone


def test_an_identifier_with_one_part_left_is_searched(store, index) -> None:
    # "from" is a stop word: from_response has one part, no phrase (Tantivy panics on one)
    pages = [make_page("form", "Use FormRequest.from_response to fill a login form."), *corpus()]
    searcher = index_pages(store, index, pages)
    assert searcher.search("FormRequest from_response").hits[0].url.endswith("/form")
    assert searcher.search("from_response").hits[0].url.endswith("/form")


def test_chinese_queries_are_segmented_for_search(store, index) -> None:
    pages = [make_page("prc", "中华人民共和国的数据库连接方法。"), *corpus()]
    searcher = index_pages(store, index, pages)
    # 人民 is no token of the page (jieba keeps 中华人民共和国 whole) ...
    assert searcher.search("人民").hits == []
    # ... but a query word whose search-mode parts are: 共和国 inside 人民共和国
    result = searcher.search("人民共和国 数据库")
    assert result.hits and result.hits[0].url.endswith("/prc")


def test_a_lone_chinese_character_in_a_query_is_wanted_not_required(store, index) -> None:
    # jieba leaves 用 alone in the query; the answer says 使用 (one word, no 用 token)
    # and a list of titles holds 用 standing alone
    answer = make_page("backup", "使用 rsync 进行备份，每天备份一次。", title="备份")
    toc = make_page("toc", "目录 备份 用 rsync 用 于 安装")
    searcher = index_pages(store, index, [answer, toc, *corpus()])
    result = searcher.search("用 rsync 备份")
    assert result.mode == "and"  # the answer holds every word it needs
    assert {h.url.rsplit("/", 1)[1] for h in result.hits} == {"backup", "toc"}
    assert "用" in result.terms
    # a query of nothing but lone characters still requires them
    only = searcher.search("用")
    assert [h.url.rsplit("/", 1)[1] for h in only.hits] == ["toc"]


def test_pagerank_is_a_bounded_prior(store, index) -> None:
    twins = [make_page(f"twin-{i}", f"分布式爬虫 crawler 分布式爬虫 {i}") for i in range(2)]
    searcher = index_pages(store, index, [*twins, *corpus()])
    plain = searcher.search("分布式 爬虫 crawler")
    assert not plain.ranked and len(plain.hits) == 2
    assert plain.hits[0].score == pytest.approx(plain.hits[1].score)
    low, high = plain.hits[1].fp, plain.hits[0].fp
    store.replace_ranks([(low, 0.9), (high, 0.01), *((p.fp, 0.05) for p in corpus())])
    ranked = searcher.search("分布式 爬虫 crawler")
    assert ranked.ranked and [h.fp for h in ranked.hits] == [low, high]
    mean, w = store.rank_mean(), searcher.rank_weight
    bm25 = {h.fp: h.score for h in plain.hits}
    assert ranked.hits[0].score == pytest.approx(bm25[low] * (1 + w * 0.9 / (0.9 + mean)))
    assert ranked.hits[1].score == pytest.approx(bm25[high] * (1 + w * 0.01 / (0.01 + mean)))


def test_pagerank_cannot_lift_a_page_without_the_words(store, index) -> None:
    answer = make_page("answer", "vacuum autovacuum tuning guide")
    toc = make_page("toc", "vacuum autovacuum contents chapter " * 3)  # lacks tuning
    searcher = index_pages(store, index, [answer, toc, *corpus()])
    store.replace_ranks([(toc.fp, 1.0), (answer.fp, 1e-9), *((p.fp, 1e-6) for p in corpus())])
    hits = searcher.search("vacuum autovacuum tuning").hits
    assert [h.fp for h in hits[:2]] == [answer.fp, toc.fp]


def test_the_prior_keeps_the_ranking_exact_past_its_pool(store, index) -> None:
    # many pages of almost the same score; the best-ranked one is far down by BM25
    pages = [make_page(f"p{i}", "排序 " * (3 + (i % 2)) + "词 " * i) for i in range(60)]
    index_pages(store, index, pages)
    store.replace_ranks([(pages[59].fp, 1.0), *((p.fp, 1e-6) for p in pages[:59])])
    small = Searcher(store, index, pool=5).search("排序", top=3)
    big = Searcher(store, index, pool=1000).search("排序", top=3)
    assert [h.fp for h in small.hits] == [h.fp for h in big.hits]


def test_duplicates_and_near_duplicates_collapse_into_one_hit(store, index) -> None:
    body = " ".join(f"word{i}" for i in range(1000))
    pages = [
        make_page("orig", f"tesseract {body}"),
        make_page("copy", f"tesseract {body}"),  # the same text
        make_page("near", f"tesseract {body} extra"),  # one word more: 2 bits of 64 differ
        make_page("other", f"tesseract {' '.join(f'other{i}' for i in range(200))}"),
        *corpus(),
    ]
    result = index_pages(store, index, pages).search("tesseract")
    by_name = {h.url.rsplit("/", 1)[1]: h for h in result.hits}
    assert "other" in by_name and by_name["other"].similar == 0
    kept = [n for n in ("orig", "copy", "near") if n in by_name]
    assert len(kept) == 1 and by_name[kept[0]].similar == 2
    assert by_name[kept[0]].as_json()["similar"] == 2
    # the hit names the pages it stands for
    folded = {u.rsplit("/", 1)[1] for u in by_name[kept[0]].similar_urls}
    assert folded == {"orig", "copy", "near"} - {kept[0]}
    assert by_name["other"].similar_urls == []
    # past the hits asked for, the pages folded in are only counted at once: named too
    (first,) = Searcher(store, index).search("word5 word6", top=1).hits
    assert first.url.rsplit("/", 1)[1] == kept[0] and first.similar == 2
    assert {u.rsplit("/", 1)[1] for u in first.similar_urls} == folded


def test_snippets_come_from_the_pages_own_text_with_its_punctuation(store, index) -> None:
    menu = "Home Prev Up Next Contents"
    pages = [
        make_page(f"p{i}", f"{menu} 第{i}章，数据库的连接：方法与示例。" + FILLER[i % 5])
        for i in range(8)
    ]
    searcher = index_pages(store, index, pages)
    snippet = searcher.search("连接 方法").hits[0].snippet.marked()
    assert "Prev" not in snippet  # the host's repeated menu is not the page's text
    assert "«连接»：«方法»" in snippet and "，" in snippet  # full-width kept
    assert searcher.search("prev").hits  # but the menu is still searchable


def test_snippets_come_from_the_index_and_an_index_without_texts_reads_the_store(
    store, index, tmp_path, monkeypatch
) -> None:
    menu = "Home Prev Up Next Contents"
    pages = [make_page(f"p{i}", f"{menu} {FILLER[i % 5]} 第{i}页") for i in range(8)]
    pages[3] = make_page("p3", f"{menu} vacuum tuning, step 3. {FILLER[3]}")
    pages[6] = make_page("p6", f"{menu} ＦＵＬＬ－ＷＩＤＴＨ　tuning，好 {FILLER[1]}")
    searcher = index_pages(store, index, pages)
    old = tmp_path / "old-index"  # an index built before the stored text, written to since
    monkeypatch.setattr("srcrawl.indexer.engine.schema", schema_before_stored_text)
    index_in_process(store, old, [p.fp for p in pages[1:]])
    monkeypatch.undo()
    index_in_process(store, old, [pages[0].fp])
    old_searcher = Searcher(store, old)
    assert old_searcher.reader.num_docs() == len(pages)
    store.put_pages([make_page("p3", "the store's text changed since: vacuum step 3, later")])
    # the index's own copy of the text, the menu left out, not the store's newer one
    assert searcher.search("vacuum step 3").hits[0].snippet.marked() == (
        f"«vacuum» tuning, «step» «3». {FILLER[3]}"
    )
    # found in the copy folded at index time, shown as the page has it (collapsed)
    assert searcher.search("full width").hits[0].snippet.marked() == (
        f"«ＦＵＬＬ»－«ＷＩＤＴＨ» tuning，好 {FILLER[1]}"
    )
    # none in the index: the store's text is read
    assert old_searcher.search("vacuum step 3").hits[0].snippet.marked() == (
        "the store's text changed since: «vacuum» «step» «3», later"
    )


def test_a_rank_run_between_searches_is_seen_whole(store, index) -> None:
    pages = [make_page(f"r{i}", "分布式爬虫 crawler " * (1 + i % 3)) for i in range(6)]
    kept = index_pages(store, index, [*pages, *corpus()])
    store.replace_ranks([(p.fp, 0.1 * (i + 1)) for i, p in enumerate(pages)])
    assert kept.search("分布式 爬虫").ranked
    store.replace_ranks([(pages[0].fp, 1.0), (pages[1].fp, 3.0)])  # the mean is now 2.0
    got, fresh = kept.search("分布式 爬虫"), Searcher(store, index).search("分布式 爬虫")
    assert [(h.fp, h.score) for h in got.hits] == [(h.fp, h.score) for h in fresh.hits]
    store.replace_ranks([])
    assert not kept.search("分布式 爬虫").ranked


def test_a_store_ranked_without_the_mean_in_meta_gets_it_at_open(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    store.replace_ranks([(p.fp, 0.5) for p in corpus()])
    with store.transaction() as cur:  # as a rank run of an older version left it
        store._execute(cur, "DELETE FROM meta WHERE k = ?", (RANK_MEAN,))
    assert store.rank_mean() is None
    store.init_schema()  # what opening the store with Config.store() runs
    assert store.rank_mean() == pytest.approx(0.5)
    assert searcher.search("图书馆").ranked


def test_a_new_commit_is_seen_by_a_searcher_kept_open(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    assert searcher.search("zebra").hits == []
    store.put_pages([make_page("zebra", "a zebra crossing")])
    index_in_process(store, index)
    searcher.reader.reload()
    assert [h.url for h in searcher.search("zebra").hits] == ["http://127.0.0.1:9/zebra"]


def test_unusable_queries_raise_a_clear_error(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    for query, message in [
        ("", "empty query"),
        ("   \t\n", "empty query"),
        ("the of and 的 了 我们", "no searchable words"),
        ("😀🚀 !!! ——", "no searchable words"),
        ('"" -', "no searchable words"),
    ]:
        with pytest.raises(QueryError, match=message):
            searcher.search(query)


def test_an_unusable_query_is_told_in_the_words_typed(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    for query, message in [
        ("to be or not to be", "«to», «be», «or», «not» are stop words"),
        ("-village", r"only pages to leave out \(-village\)"),
        ("-site:example.com", r"only pages to leave out \(-site:example.com\)"),
    ]:
        with pytest.raises(QueryError, match=message):
            searcher.search(query)


def test_site_takes_a_url_and_an_unclosed_quote_is_searched_as_words(store, index) -> None:
    from srcrawl.indexer.search.query import parse

    assert parse("site:https://Docs.Example.com:8080/guide/?x=1").sites == ["docs.example.com:8080"]
    assert parse("site:example.com/a/b").sites == ["example.com"]
    assert parse("site:example.com").notes == []
    stray = parse('village "xqz abc')
    assert stray.words == ["village", '"xqz', "abc"] and stray.phrases == []
    assert "not closed" in stray.notes[0]
    assert parse('"a b" c').phrases == ["a b"] and parse('"a b" c').notes == []
    searcher = index_pages(store, index, corpus())
    result = searcher.search('"tesseract')
    assert result.mode == "and" and any("not closed" in n for n in result.notes)
    url = searcher.search("tesseract site:http://127.0.0.1:9/some/path")
    assert url.hits and any("site: takes a host" in n for n in url.notes)


def test_a_word_no_page_holds_is_named(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    assert searcher.search("tesseract vilagee").missing == ["vilagee"]
    none = searcher.search("crawlingzz")
    assert none.missing == ["crawlingzz"] and any("«crawlingzz»" in n for n in none.notes)
    assert searcher.search("tesseract").missing == []
    assert none.suggestion is None  # nothing near it


def test_a_misspelt_word_gets_a_suggestion_from_the_index_s_terms(store, index) -> None:
    pages = [make_page("village", "The village elders met in the village hall."), *corpus()]
    searcher = index_pages(store, index, pages)
    # a letter swapped, one left out: the nearest term; the stem "villag" given back the
    # ending the stemmer took from the word typed
    result = searcher.search("Tesserakt vilage -zebra")
    assert result.missing == ["tesserakt", "vilage"]
    assert result.suggestion == "tesseract village -zebra"
    assert searcher.search("tesseract village").suggestion is None
    assert searcher.search("qqqqqqq").suggestion is None


def test_a_word_too_long_to_be_indexed_is_named_not_called_a_stop_word(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    long = "x" * 100
    with pytest.raises(QueryError, match=r"over 64 characters are not indexed: 'x{20}…'") as e:
        searcher.search(long)
    assert "stop words" not in str(e.value)
    result = searcher.search(f"tesseract {long}")
    assert result.hits[0].url.endswith("/planted") and result.terms == ["tesseract"]
    assert any("left out, words over 64 characters" in n for n in result.notes)


def test_hostile_queries_get_sensible_answers(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    pages_before = store.count("pages")
    for query in [
        "'; DROP TABLE pages; --",
        "1 OR 1=1",
        "%' OR term LIKE '%",
        "量子纠缠' UNION SELECT url FROM pages --",
        'title:x AND body:* NOT "unclosed',
        'site: -site: -- ""',
    ]:
        result = searcher.search(query)
        assert all(h.url.startswith("http://127.0.0.1:9/") for h in result.hits)
    assert store.count("pages") == pages_before
    assert (
        searcher.search("量子纠缠' UNION SELECT url FROM pages --").hits[0].url.endswith("/planted")
    )
    nothing = searcher.search("zzzunknown 无此词语哈")
    assert nothing.mode == "none" and nothing.hits == [] and nothing.notes


def test_a_10000_character_query_is_cut_and_answered(store, index) -> None:
    searcher = index_pages(store, index, corpus())
    query = ("tesseract 量子纠缠 " + "词" * 40 + " ") * 300
    assert len(query) > 10_000
    result = searcher.search(query)
    assert result.hits and result.hits[0].url.endswith("/planted")
    assert any("10,000" in n for n in result.notes)
    many = " ".join(f"w{i}" for i in range(100))
    assert len(searcher.search(many).terms) == 32


def test_no_index_and_an_empty_index_are_clear_errors(store, index) -> None:
    with pytest.raises(QueryError, match="no index at"):
        Searcher(store, index).search("北京")
    index_in_process(store, index)  # nothing stored: an index without documents
    with pytest.raises(QueryError, match="index is empty"):
        Searcher(store, index).search("北京")


def test_snippets_mark_whole_words_only() -> None:
    text = "An engineer builds an engine. 搜索引擎很快。" + "padding " * 100
    snippet = make_snippet(text, ["engine", "搜索引擎"], width=60)
    assert [snippet.text[a:b] for a, b in snippet.marks] == ["engine", "搜索引擎"]
    assert make_snippet("ＦＵＬＬ width，好", ["full"]).marked() == "«ＦＵＬＬ» width，好"
    assert make_snippet("no match here", ["zzz"]) == Snippet("no match here")
    assert make_snippet("x" * 500, ["zzz"], width=10) == Snippet("x" * 10 + "…")


def test_a_snippet_s_marks_are_ranges_of_its_text_the_page_s_own_marks_only_text() -> None:
    # the marks are where the terms are in the fragment shown, "…" before it counted;
    # a « » the page itself has is text, never taken for a mark
    text = "Lead-in words, " * 20 + "the «vacuum» command: VACUUM FULL reclaims space"
    snippet = make_snippet(text, ["vacuum", "full"], width=60)
    assert snippet.text.startswith("…") and snippet.text.count("«") == 1
    assert [snippet.text[a:b] for a, b in snippet.marks] == ["vacuum", "VACUUM", "FULL"]
    assert "«vacuum» command" in snippet.text  # the page's own, unmarked
    assert snippet.marked("[", "]").endswith(
        "the «[vacuum]» command: [VACUUM] [FULL] reclaims space"
    )
    assert snippet.marked() == snippet.marked("«", "»")
    assert not make_snippet("", ["x"])  # nothing to show
