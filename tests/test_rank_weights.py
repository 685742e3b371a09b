"""The ranking's weights as one object: the defaults rank as the constants they replaced
did, and each weight changes what it weighs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from tantivy_index import index_in_process

from srcrawl.benchmarks.loco import BEFORE_JOINT, BEFORE_LONG
from srcrawl.core.defaults import (
    DEFAULT_MAX_QUERY_TERMS,
    DEFAULT_RANK_WEIGHT,
    LONG_QUERY_WORDS,
    SOME_WORDS_SHARE,
)
from srcrawl.core.urls import fingerprint
from srcrawl.indexer.search import Searcher
from srcrawl.indexer.search.weights import DEFAULT_WEIGHTS, RankWeights
from srcrawl.sql.pages import Page

MENU = "home guide reference download community about contact "


def _page(name: str, text: str, title: str = "", host: str = "127.0.0.1:9") -> Page:
    url = f"http://{host}/{name}"
    return Page(fp=fingerprint(url), url=url, host=host, fetched_at=1.0, title=title, text=text)


def weights_pages() -> tuple[list[Page], list[tuple[int, int, str]], list[tuple[int, float]]]:
    """Pages on topics, a table of contents that links to each (its anchor text) and ranks
    most, release notes; every page wrapped in the host's menu (its repeated text)."""
    topics = [
        ("vacuum", "vacuum autovacuum tuning for large tables", "Vacuum tuning"),
        ("backup", "backup with pg_dump and restore with pg_restore", "Backup and restore"),
        ("auth", "client authentication in pg_hba.conf: host, method, user", "Authentication"),
        ("replica", "streaming replication to a standby server and failover", "Replication"),
        ("index", "btree gin gist indexes speed up queries on tables", "Indexes"),
        ("nft", "move the iptables rules to nftables with iptables-translate " * 2, "nftables"),
        ("cache", "the per-view cache decorator caches a view's response", "Cache"),
        ("forms", "a form submission shows messages to the user after saving", "Forms"),
        ("messages", "the messages framework displays one-time notes to users", "Messages"),
        ("upload", "handling uploaded files: request.FILES and file storage", "File uploads"),
        ("备份", "用 rsync 备份 服务器 的 数据，再 恢复 到 新 机器", "备份与恢复"),
        ("防火墙", "防火墙 规则 用 nftables 配置，迁移 iptables 规则", "防火墙"),
    ]
    pages = [_page(n, MENU + t + " " + MENU, title) for n, t, title in topics]
    contents = " ".join(f"{title} chapter" for _n, _t, title in topics)
    toc = _page("toc", MENU + "contents " + contents + " migrate iptables nftables", "Contents")
    pages.append(toc)
    pages += [_page(f"filler-{i}", MENU + f"release notes {i} for version {i}") for i in range(12)]
    # links from the table of contents (anchor text) and a few more with other words
    links = [(toc.fp, p.fp, p.title) for p in pages[: len(topics)]]
    links += [
        (pages[0].fp, pages[3].fp, "standby setup"),
        (pages[4].fp, pages[1].fp, "dump the database"),
        (pages[8].fp, pages[7].fp, "flash messages"),
    ]
    ranks = [(p.fp, 0.02) for p in pages] + [(toc.fp, 0.5)]
    return pages, links, list(dict(ranks).items())


BEFORE = BEFORE_JOINT
"""The weights as the constants were before they were one object, and until the weights
chosen together (``srcrawl bench loco --joint``) replaced them."""

# each query's top 10 with the weights as constants, before they were one object
EXPECTED = {
    "vacuum tuning": ["vacuum", "toc"],
    "pg_hba.conf": ["auth"],
    "backup restore": ["backup", "toc"],
    "standby setup": ["replica"],
    "migrate iptables nftables": ["nft", "toc", "防火墙"],
    "display messages to users after a form submission": ["forms", "messages", "toc", "auth"],
    "per-view cache decorator": ["cache", "toc"],
    "handling uploaded files": ["upload", "toc"],
    "dump the database": ["backup"],
    "用 rsync 备份": ["备份", "toc"],
    "迁移 防火墙 规则": ["防火墙", "toc"],
    "chapter": ["toc"],
    "guide reference": [
        "toc",
        "nft",
        "备份",
        "cache",
        "replica",
        "index",
        "upload",
        "messages",
        "forms",
        "backup",
    ],
}


@pytest.fixture
def weighed(store, tmp_path):
    """A searcher of the pages of :func:`weights_pages`, linked and ranked, given weights."""
    pages, links, ranks = weights_pages()
    store.put_pages(pages)
    store.put_links(links)
    index_in_process(store, tmp_path / "index")
    store.replace_ranks(ranks)
    return lambda weights=DEFAULT_WEIGHTS: Searcher(store, tmp_path / "index", weights=weights)


def names(searcher: Searcher, query: str) -> list[str]:
    return [h.url.rsplit("/", 1)[1] for h in searcher.search(query).hits]


def test_the_weights_as_constants_rank_as_before(weighed) -> None:
    searcher = weighed(BEFORE)
    assert {q: names(searcher, q) for q in EXPECTED} == EXPECTED
    # the weights chosen together rank these as well, but for the table of contents,
    # which says "migrate iptables nftables" word for word, first for those words
    joint = weighed(replace(BEFORE_LONG, meaning=0.0))
    changed = {"migrate iptables nftables": ["toc", "nft", "防火墙"]}
    assert {q: names(joint, q) for q in EXPECTED} == {**EXPECTED, **changed}
    # and with a page short of one word of three counting two thirds, not half, the
    # section that names nftables throughout (but not "migrate") is first again
    before_meaning = weighed(replace(DEFAULT_WEIGHTS, meaning=0.0))
    assert {q: names(before_meaning, q) for q in EXPECTED} == EXPECTED
    # what a query means reorders two: the page on users' logins before the table of
    # contents; of the pages holding one word of "guide reference", the index first and
    # the table of contents (a list of titles) fourth, and the Chinese page (no vector:
    # the model's words are English) below the ten
    meant = {
        "display messages to users after a form submission": ["forms", "messages", "auth", "toc"],
        "guide reference": [
            "index",
            "cache",
            "vacuum",
            "toc",
            "upload",
            "nft",
            "backup",
            "messages",
            "auth",
            "forms",
        ],
    }
    assert {q: names(weighed(), q) for q in EXPECTED} == {**EXPECTED, **meant}
    # the defaults are the constants of srcrawl/core/defaults.py
    assert DEFAULT_WEIGHTS.rank == DEFAULT_RANK_WEIGHT
    assert DEFAULT_WEIGHTS.some_words == SOME_WORDS_SHARE


def test_a_field_weighed_zero_finds_nothing_by_itself(weighed) -> None:
    # "setup" is only in the anchor text of a link to the replication page
    found = weighed().search("standby setup")
    assert found.mode == "and" and [h.url.rsplit("/", 1)[1] for h in found.hits] == ["replica"]
    without = weighed(replace(DEFAULT_WEIGHTS, anchor=0.0)).search("standby setup")
    assert without.mode == "or" and without.missing == ["setup"]
    assert "anchor" not in RankWeights(anchor=0.0).fields()
    # nor the text's words as typed (the exact field holds them) once the text weighs 0:
    # "translate" is only in the nftables page's text
    assert names(weighed(), "translate") == ["nft"]
    assert names(weighed(replace(DEFAULT_WEIGHTS, body=0.0)), "translate") == []


def test_the_prior_weighed_zero_is_off(weighed) -> None:
    # the table of contents holds the most rank: with the prior it leads a query of
    # words every page holds (the menu), without it the order is BM25's alone (what the
    # query means left out: it would put the index first either way)
    words = replace(DEFAULT_WEIGHTS, meaning=0.0)
    ranked, plain = weighed(words), weighed(replace(words, rank=0.0))
    assert ranked.search("guide reference").ranked
    assert not plain.search("guide reference").ranked
    assert names(ranked, "guide reference")[0] == "toc"
    assert names(plain, "guide reference")[0] != "toc"


def test_no_share_for_pages_short_of_a_word_lists_them_after(weighed) -> None:
    # the table of contents holds every word of the query once; the nftables page says
    # "move" where the query says "migrate", and names its topic throughout
    assert names(weighed(BEFORE), "migrate iptables nftables")[:2] == ["nft", "toc"]
    strict = weighed(replace(BEFORE, some_words=0.0))
    assert names(strict, "migrate iptables nftables")[:2] == ["toc", "nft"]


def test_pages_that_link_to_many_lowered_by_their_out_links(store, weighed) -> None:
    pages, links, _ranks = weights_pages()
    toc = next(p for p in pages if p.url.endswith("/toc"))
    with store.rank_snapshot() as snapshot:
        out = snapshot.out_links([toc.fp, pages[0].fp, pages[-1].fp])
        mean = snapshot.out_link_mean()
    assert out == {toc.fp: 12, pages[0].fp: 1}  # the last release notes link nowhere
    assert mean == pytest.approx(len(links) / 4)  # 15 links from 4 pages
    # the table of contents holds the menu's words as every page does, and leads them by
    # its rank; lowered by its 12 out-links it drops below the pages that link to none
    # (what the query means left out: it would put the index first either way)
    words = replace(DEFAULT_WEIGHTS, meaning=0.0)
    plain, lowered = weighed(words), weighed(replace(words, hub=0.6))
    plain_hits = plain.search("guide reference").hits
    assert plain_hits[0].url.endswith("/toc")
    every = lowered.search("guide reference", top=50).hits
    low = {h.url.rsplit("/", 1)[1]: h.score for h in every}
    high = {h.url.rsplit("/", 1)[1]: h.score for h in plain_hits}
    assert low["toc"] == pytest.approx(high["toc"] * (1 - 0.6 * 12 / (12 + mean)))
    assert names(lowered, "guide reference")[0] != "toc"


def test_words_next_to_each_other_in_the_query_count_when_near_in_the_text(store, tmp_path) -> None:
    # "near": in a query of three words or more, a page that has two adjacent query words
    # within NEAR_SLOP words of each other ("create a new project") gains over one that
    # has them only far apart, even where plain BM25 puts the far page first (it says
    # each word twice)
    filler = " ".join(f"filler{i}" for i in range(40))
    close = _page("close", f"how to create a new project in the tool {filler} {filler} {filler}")
    pad = " ".join(f"pad{i}" for i in range(40))  # (not a near-duplicate of the close page)
    apart = _page("apart", f"create {pad} new {pad} project {pad} create {pad} new project")
    store.put_pages([close, apart, *(_page(f"other-{i}", f"other text {i}") for i in range(8))])
    index_in_process(store, tmp_path / "index")
    plain = Searcher(store, tmp_path / "index", weights=replace(DEFAULT_WEIGHTS, near=0.0))
    near = Searcher(store, tmp_path / "index", weights=replace(DEFAULT_WEIGHTS, near=1.0))
    query = "create new project"
    assert names(plain, query) == ["apart", "close"]
    assert names(near, query) == ["close", "apart"]
    scores = {h.url.rsplit("/", 1)[1]: h.score for h in near.search(query).hits}
    plain_scores = {h.url.rsplit("/", 1)[1]: h.score for h in plain.search(query).hits}
    assert scores["close"] > plain_scores["close"]
    # the pairs are of plain words next to each other in a query of NEAR_MIN_WORDS words
    # or more: none for one or two words, for an identifier, or with the signal off
    units = lambda text, w: near.units(text)[0] if w else plain.units(text)[0]  # noqa: E731
    assert len(units("create a new project", True).near) == 2  # create-new, new-project
    assert units("create new project", False).near == []
    assert units("create project", True).near == []  # two words: a page with both is enough
    assert names(near, "create project") == names(plain, "create project")
    assert units("project", True).near == []
    assert len(units("pg_hba.conf new project", True).near) == 1  # new-project
    # past DEFAULT_MAX_QUERY_TERMS words, only the pairs of the words kept
    many = near.units(" ".join(f"word{i}" for i in range(DEFAULT_MAX_QUERY_TERMS + 8)))[0]
    assert len(many.required) == DEFAULT_MAX_QUERY_TERMS
    assert len(many.near) == DEFAULT_MAX_QUERY_TERMS - 1


def _only(field: str, **more: float) -> RankWeights:
    """Weights matching in ``field`` alone (its default weight), no prior, no meaning."""
    zero = {f: 0.0 for f in ("title", "body", "anchor", "boiler", "exact")}
    kept = {field: getattr(DEFAULT_WEIGHTS, field)}
    return replace(DEFAULT_WEIGHTS, **{**zero, **kept, "rank": 0.0, "meaning": 0.0, **more})


def _scores(searcher: Searcher, query: str) -> dict[str, float]:
    return {h.url.rsplit("/", 1)[1]: h.score for h in searcher.search(query, top=50).hits}


def test_a_word_s_fields_summed_or_its_best_field_and_a_share_of_the_rest(weighed) -> None:
    # "tie": 1 (the default) sums a word's score in each field; below 1 it is Tantivy's
    # disjunction max, the best field's score and the tie's share of the others'. The
    # backup page holds "backup" in its title, its text and the anchor text of the
    # table of contents' link to it (its text's share as typed is left out: exact 0)
    fields = {
        f: _scores(weighed(_only(f)), "backup")["backup"] for f in ("title", "body", "anchor")
    }
    best, total = max(fields.values()), sum(fields.values())
    assert min(fields.values()) > 0
    for tie in (0.0, 0.3, 1.0):
        weights = replace(DEFAULT_WEIGHTS, rank=0.0, tie=tie, exact=0.0, meaning=0.0)
        got = _scores(weighed(weights), "backup")["backup"]
        assert got == pytest.approx(best + tie * (total - best), rel=1e-5)
    # its words are no flat sum of term queries then: a page short of a word is still
    # found, scored by the words it holds
    found = weighed(replace(DEFAULT_WEIGHTS, tie=0.0)).search("backup frobnicate")
    assert found.mode == "or" and found.hits[0].url.endswith("/backup")


def test_a_word_s_idf_in_the_whole_page_weighs_its_fields(store, tmp_path) -> None:
    # "shared_idf": a word of many pages' text but one title ("photo") scores in that
    # title as a word of that many pages would (the idf of its largest document
    # frequency in any field over its idf in the title, to the power given); a word as
    # rare in titles as in pages ("guillotine") is weighed as before
    animals = ["cat", "dog", "fox", "owl", "elk", "bee", "ant", "cow", "pig"]
    pages = [_page("photo", "how to take a photo of a bird", title="Old photo")]
    pages += [_page(a, f"the {a} in this photo was seen {i} times") for i, a in enumerate(animals)]
    pages += [_page("guillotine", "cut the image along its guides", title="Guillotine")]
    store.put_pages(pages)
    index_in_process(store, tmp_path / "index")

    def title_score(word: str, page: str, power: float) -> float:
        weights = _only("title", shared_idf=power)
        return _scores(Searcher(store, tmp_path / "index", weights=weights), word)[page]

    searcher = Searcher(store, tmp_path / "index").reader.snapshot()[0]
    n = searcher.num_docs
    most = max(searcher.doc_freq(f, "photo") for f in ("title", "body", "anchor", "boiler"))
    assert most >= 9 and searcher.doc_freq("title", "photo") == 1
    idf = lambda df: math.log(1 + (n - df + 0.5) / (df + 0.5))  # noqa: E731 (BM25's)
    assert idf(most) / idf(1) < 0.25
    for power in (0.5, 1.0):
        assert title_score("photo", "photo", power) == pytest.approx(
            title_score("photo", "photo", 0.0) * (idf(most) / idf(1)) ** power, rel=1e-5
        )
        assert title_score("guillotine", "guillotine", power) == pytest.approx(
            title_score("guillotine", "guillotine", 0.0), rel=1e-5
        )


def test_a_query_s_meaning_is_added_to_the_score_of_the_best_pages(store, tmp_path) -> None:
    # "meaning": each page's vector (WordLlama's, its weights in its wheel) made when it
    # is indexed and kept in the index; an English query's best pages reordered by
    # score / best score + weight × cosine(query, page); 0 leaves the ranking alone
    import tantivy

    from srcrawl.indexer.engine import MEANING
    from srcrawl.indexer.search import meaning

    topics = {
        "red-eye": ("Red eye removal", "remove the red color from eyes in flash photographs"),
        "layers": ("Layers", "stack transparent layers to compose an image"),
        "brushes": ("Brushes", "paint strokes with brushes of many shapes"),
        "print": ("Printing", "send the image to a printer on paper"),
        "scale": ("Scale image", "change the size of an image in pixels"),
    }
    pages = [_page(n, f"{text} with the tool", title=t) for n, (t, text) in topics.items()]
    store.put_pages(pages)
    index_in_process(store, tmp_path / "index")

    def search(weight: float, query: str) -> list[tuple[str, float]]:
        weights = replace(DEFAULT_WEIGHTS, meaning=weight)
        hits = Searcher(store, tmp_path / "index", weights=weights).search(query).hits
        return [(h.url.rsplit("/", 1)[1], h.score) for h in hits]

    query = "smaller image to send"  # "send" is the printing page's word
    plain = search(0.0, query)
    assert plain[0][0] == "print"
    # each page's vector as the index keeps it (int8)
    searcher = Searcher(store, tmp_path / "index").reader.snapshot()[0]
    addresses = [a for _s, a in searcher.search(tantivy.Query.all_query(), 10).hits]
    fps = searcher.fast_field_values("fp", addresses)
    docs = [searcher.doc(a) for a in addresses]
    kept = {f: bytes(d.get_first(MEANING)) for f, d in zip(fps, docs, strict=True)}
    q = meaning.vectors([query])[0]
    cos = {p.url.rsplit("/", 1)[1]: float(meaning.unpacked(kept[p.fp]) @ q) for p in pages}
    least = min(cos[n] for n, _ in plain)
    for weight in (0.5, 100.0):
        # in the ranking's units: its score, raised by the weight of the best score for
        # each step of the cosine above the pool's least
        best = max(s for _, s in plain)
        lifted = [(n, s + weight * best * (cos[n] - least)) for n, s in plain]
        got = search(weight, query)
        assert [n for n, _ in got] == [n for n, _ in sorted(lifted, key=lambda h: -h[1])]
        assert [s for _, s in got] == pytest.approx(sorted((s for _, s in lifted), reverse=True))
    assert search(100.0, query)[0][0] == "scale"  # the page that means it
    # a Chinese query is not weighed by it (the model's words are English)
    mixed = search(0.0, "smaller image 图片")
    assert mixed and search(100.0, "smaller image 图片") == mixed


def test_a_page_s_vector_is_kept_in_the_index_and_its_absence_is_searched_by_words(
    store, tmp_path, monkeypatch
) -> None:
    import numpy as np
    import tantivy
    from tantivy_index import schema_before_exact

    from srcrawl.indexer.engine import MEANING, built_before, open_index
    from srcrawl.indexer.search import meaning

    pages = [
        _page("en", "remove the red color from eyes in flash photographs", title="Red eye"),
        _page("zh", "照片中的红眼可以用这个工具去除" * 3, title="红眼"),
    ]
    store.put_pages(pages)
    index_in_process(store, tmp_path / "index")
    searcher = Searcher(store, tmp_path / "index").reader.snapshot()[0]
    every = tantivy.Query.all_query()
    vectors = [searcher.doc(a).get_first(MEANING) for _s, a in searcher.search(every, 10).hits]
    # the English page has its 256 int8 components, the Chinese one none
    assert sorted(len(bytes(v)) if v else 0 for v in vectors) == [0, 256]
    raw = next(bytes(v) for v in vectors if v)
    want = meaning.vectors([meaning.page_text("Red eye", pages[0].text)])[0]
    assert float(meaning.unpacked(raw) @ want) > 0.99
    # the vectors are WordLlama's own (its tokenizer run once a word, not once a text)
    # (white space made single spaces, a word with Chinese in it left out)
    texts = ["Red eye\n removal  of the red\tcolor (flash)", "红眼 eyes 红眼s", ""]
    spaced = ["Red eye removal of the red color (flash)", "eyes"]
    assert meaning.vectors(texts)[:2] == pytest.approx(meaning.model().embed(spaced, norm=True))
    assert not meaning.vectors(texts)[2].any()  # no words, no direction
    assert np.abs(np.frombuffer(raw, np.int8)).max() <= meaning.SCALE
    # an index built before the vectors: its pages are ranked by their words alone
    monkeypatch.setattr("srcrawl.indexer.engine.schema", schema_before_exact)
    index_in_process(store, tmp_path / "old", [p.fp for p in pages])
    monkeypatch.undo()
    assert "pages' vectors (a query's meaning does not count)" in built_before(
        open_index(tmp_path / "old")
    )
    old = Searcher(store, tmp_path / "old", weights=replace(DEFAULT_WEIGHTS, meaning=100.0))
    assert not old.reader.has_meaning
    off = Searcher(store, tmp_path / "old", weights=replace(DEFAULT_WEIGHTS, meaning=0.0))
    assert [h.url for h in old.search("red eyes").hits] == [
        h.url for h in off.search("red eyes").hits
    ]


def test_without_the_model_pages_are_indexed_without_vectors(monkeypatch) -> None:
    # (WordLlama is a dependency; a process without it indexes and searches by words)
    import base64
    from types import SimpleNamespace

    import numpy as np

    from srcrawl.indexer.search import meaning
    from srcrawl.indexer.search.collect import Scored

    def missing() -> None:
        raise meaning.MeaningUnavailable("the meaning signal needs WordLlama")

    monkeypatch.setattr(meaning, "model", missing)
    assert not meaning.available()
    assert meaning.page_vectors([("Red eye", "remove red eyes"), ("Layers", "stack")]) == ["", ""]
    # an index with vectors searched where the model is not: ranked by its words
    kept = base64.b64decode(meaning.packed(np.full(256, 1 / 16, np.float32)))
    stored = SimpleNamespace(doc=lambda _address: SimpleNamespace(get_first=lambda _f: kept))
    found = [Scored(fp, 1.0 / fp, 1.0 / fp, 0, 0, address=fp) for fp in (1, 2, 3)]
    assert meaning.fused(list(found), "red eyes", stored, 0.5) == found


def test_a_missing_model_is_looked_for_once_and_a_loaded_one_brings_its_tokenizer(
    monkeypatch,
) -> None:
    import sys

    from srcrawl.indexer.search import meaning

    # loaded: the tokenizer of one word is built with it, not at the first English query
    assert meaning.available()
    assert meaning._word_tokenizer.cache_info().currsize == 1
    meaning._loaded.cache_clear()
    monkeypatch.setitem(sys.modules, "wordllama", None)  # its import fails
    try:
        assert not meaning.available() and not meaning.available()
        with pytest.raises(meaning.MeaningUnavailable, match="pip install wordllama"):
            meaning.model()
        assert meaning._loaded.cache_info().misses == 1  # the import was tried once
    finally:
        meaning._loaded.cache_clear()  # the next test loads the real model again


def test_a_kept_vector_of_another_size_counts_as_none() -> None:
    # (an index some of whose pages a model of another size made vectors of)
    import base64
    from types import SimpleNamespace

    import numpy as np

    from srcrawl.indexer.search import meaning
    from srcrawl.indexer.search.collect import Scored

    q = meaning.vectors(["red eyes"])[0]
    near = base64.b64decode(meaning.packed(q))
    far = base64.b64decode(meaning.packed(-q))
    kept = {1: far, 2: near[:128], 3: near, 4: far}  # page 2's: half the size

    def doc(address: int) -> SimpleNamespace:
        return SimpleNamespace(get_first=lambda _f: kept[address])

    found = [Scored(fp, 1.0, 1.0, 0, 0, address=fp) for fp in (1, 2, 3, 4)]
    got = meaning.fused(list(found), "red eyes", SimpleNamespace(doc=doc), 0.5)
    assert got[0].fp == 3  # the one near in meaning first, no error
    assert np.isclose(got[0].score, 1.0 + 0.5 * 1.0 * 2.0, atol=0.02)  # cos 1 against −1


def test_an_english_query_over_pages_without_vectors_stops_reading_them() -> None:
    # the best four pages without a vector (an English word in Chinese pages): the order
    # stays as the words made it, and no more documents are read
    import base64
    from types import SimpleNamespace

    import numpy as np

    from srcrawl.indexer.search import meaning
    from srcrawl.indexer.search.collect import Scored

    kept = base64.b64decode(meaning.packed(np.full(256, 1 / 16, np.float32)))
    read: list[int] = []

    def doc(address: int) -> SimpleNamespace:
        read.append(address)
        return SimpleNamespace(get_first=lambda _f: kept if address > 4 else None)

    found = [Scored(fp, 1.0 / fp, 1.0 / fp, 0, 0, address=fp) for fp in range(1, 9)]
    assert meaning.fused(list(found), "red eyes", SimpleNamespace(doc=doc), 0.5) == found
    assert read == [1, 2, 3, 4] == list(range(1, meaning.NONE_FIRST + 1))


def test_a_long_query_weighs_the_title_and_the_links_less() -> None:
    w = DEFAULT_WEIGHTS
    assert w.for_words(LONG_QUERY_WORDS - 1) is w
    long = w.for_words(LONG_QUERY_WORDS)
    assert (long.title, long.anchor) == (w.long_title, w.long_anchor) != (w.title, w.anchor)
    assert long.for_words(LONG_QUERY_WORDS) is long  # weighed once, not twice
    assert BEFORE_LONG.for_words(10) is BEFORE_LONG  # the same weights: nothing changes


def test_a_page_short_of_a_word_counts_more_in_a_longer_query() -> None:
    w = replace(DEFAULT_WEIGHTS, some_words=0.5, some_words_rise=1.0)
    # short of one word of n: (n - 1)/n of its score, as the coordination factor
    assert [w.some_share(n) for n in (1, 2, 3, 4, 6)] == pytest.approx(
        [0.5, 0.5, 2 / 3, 0.75, 5 / 6]
    )
    assert replace(w, some_words_rise=0.0).some_share(6) == 0.5
    assert replace(w, some_words=0.0).some_share(6) == 0.0  # strict tiers stay strict


def test_a_long_task_query_finds_the_page_that_answers_it_not_the_one_linked_by_a_word(
    store, tmp_path
) -> None:
    # the page on logs is linked as "log files" from every page, titled so and, being
    # long, holds the task's words somewhere; the page on logging in holds them in a line
    # (neither says "people")
    logs = "log files: the access log, the error log, log rotation and log formats. " * 3
    logs += "make a folder to see the username of each request in the log."
    pages = [
        _page("logs", logs, "Log Files"),
        _page("auth", "make users log in with a username before they can see the folder", "Auth"),
    ]
    pages += [_page(f"m{i}", f"module {i} writes its own records") for i in range(8)]
    store.put_pages(pages)
    store.put_links([(p.fp, pages[0].fp, "log files") for p in pages[2:]])
    index_in_process(store, tmp_path / "index")
    query = "make people log in with a username before they see a folder"
    # (as it was, before a word as typed and what a query means counted)
    before = replace(BEFORE_LONG, exact=0.0, meaning=0.0)
    assert names(Searcher(store, tmp_path / "index", weights=before), query)[0] == "logs"
    assert names(Searcher(store, tmp_path / "index"), query)[0] == "auth"
    # long queries' weights alone put it first
    no_exact = replace(DEFAULT_WEIGHTS, exact=0.0)
    assert names(Searcher(store, tmp_path / "index", weights=no_exact), query)[0] == "auth"


def test_the_words_counted_for_a_long_query_are_the_units_a_page_must_hold() -> None:
    # the count is taken before the units are built (their weights hang on it): it is
    # the number of required units units_of makes, identifiers, repeats, lone Chinese
    # characters beside a word, and stop words included
    from srcrawl.indexer.search import query as q
    from srcrawl.indexer.tokenizer import get_tokenizer

    tokenizer = get_tokenizer(None)
    for text in [
        "vacuum tuning",
        "make people log in with a username before they see a folder",
        "pg_hba.conf host method user",
        "split splits splitting split",
        "书 本 数据 备份 数据",
        "迁移 防火墙 规则 到 nftables",
        "the of and",
    ]:
        parsed = q.parse(text)
        words = [q._read_word(tokenizer, w) for w in parsed.words]
        units = q.units_of(tokenizer, parsed, BEFORE_LONG)
        assert q._required_words(words) == len(units.required), text
