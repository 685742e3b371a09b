"""The ranking's weights as one object: the defaults rank as the constants they replaced
did, and each weight changes what it weighs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tantivy_index import index_in_process

from srcrawl.core.defaults import DEFAULT_MAX_QUERY_TERMS, DEFAULT_RANK_WEIGHT, SOME_WORDS_SHARE
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


def test_the_default_weights_rank_as_before(weighed) -> None:
    searcher = weighed()
    assert {q: names(searcher, q) for q in EXPECTED} == EXPECTED
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


def test_the_prior_weighed_zero_is_off(weighed) -> None:
    # the table of contents holds the most rank: with the prior it leads a query of
    # words every page holds (the menu), without it the order is BM25's alone
    ranked, plain = weighed(), weighed(replace(DEFAULT_WEIGHTS, rank=0.0))
    assert ranked.search("guide reference").ranked
    assert not plain.search("guide reference").ranked
    assert names(ranked, "guide reference")[0] == "toc"
    assert names(plain, "guide reference")[0] != "toc"


def test_no_share_for_pages_short_of_a_word_lists_them_after(weighed) -> None:
    # the table of contents holds every word of the query once; the nftables page says
    # "move" where the query says "migrate", and names its topic throughout
    assert names(weighed(), "migrate iptables nftables")[:2] == ["nft", "toc"]
    strict = weighed(replace(DEFAULT_WEIGHTS, some_words=0.0))
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
    plain, lowered = weighed(), weighed(replace(DEFAULT_WEIGHTS, hub=0.6))
    plain_hits = plain.search("guide reference").hits
    assert plain_hits[0].url.endswith("/toc")
    every = lowered.search("guide reference", top=50).hits
    low = {h.url.rsplit("/", 1)[1]: h.score for h in every}
    high = {h.url.rsplit("/", 1)[1]: h.score for h in plain_hits}
    assert low["toc"] == pytest.approx(high["toc"] * (1 - 0.6 * 12 / (12 + mean)))
    assert names(lowered, "guide reference")[0] != "toc"


def test_words_next_to_each_other_in_the_query_count_when_near_in_the_text(store, tmp_path) -> None:
    # "near": a page that has two adjacent query words within NEAR_SLOP words of each
    # other ("create a new project") gains over one that has both only far apart, even
    # where plain BM25 puts the far page first (it says each word twice)
    filler = " ".join(f"filler{i}" for i in range(40))
    close = _page("close", f"how to create a new project in the tool {filler} {filler} {filler}")
    apart = _page("apart", f"create {filler} project {filler} create {filler} project")
    store.put_pages([close, apart, *(_page(f"other-{i}", f"other text {i}") for i in range(8))])
    index_in_process(store, tmp_path / "index")
    plain = Searcher(store, tmp_path / "index")
    near = Searcher(store, tmp_path / "index", weights=replace(DEFAULT_WEIGHTS, near=1.0))
    assert names(plain, "create project") == ["apart", "close"]
    assert names(near, "create project") == ["close", "apart"]
    scores = {h.url.rsplit("/", 1)[1]: h.score for h in near.search("create project").hits}
    plain_scores = {h.url.rsplit("/", 1)[1]: h.score for h in plain.search("create project").hits}
    assert scores["apart"] == pytest.approx(plain_scores["apart"])  # not near: nothing added
    # the pairs are of plain words next to each other in the query: none for one word,
    # for an identifier, or with the signal off
    units = lambda text, w: near.units(text)[0] if w else plain.units(text)[0]  # noqa: E731
    assert len(units("create a new project", True).near) == 2  # create-new, new-project
    assert units("create project", False).near == []
    assert units("project", True).near == []
    assert units("pg_hba.conf project", True).near == []
    assert names(near, "project") == names(plain, "project")
    # past DEFAULT_MAX_QUERY_TERMS words, only the pairs of the words kept
    many = near.units(" ".join(f"word{i}" for i in range(DEFAULT_MAX_QUERY_TERMS + 8)))[0]
    assert len(many.required) == DEFAULT_MAX_QUERY_TERMS
    assert len(many.near) == DEFAULT_MAX_QUERY_TERMS - 1
