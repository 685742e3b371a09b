"""Each page's language named at index time; the lang:, site:, since: and until: filters;
a search's counts by language, host and fetch month (facets) against counts made page by
page; an index built before those fields still searched."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime

import orjson
import pytest
import tantivy
from tantivy_index import index_in_process

from srcrawl.core.urls import fingerprint
from srcrawl.indexer import engine
from srcrawl.indexer.documents import DocumentsFormatError, pack, unpack
from srcrawl.indexer.engine import IndexDoc
from srcrawl.indexer.language import detect_language
from srcrawl.indexer.search import Searcher
from srcrawl.indexer.search.query import FilterError
from srcrawl.sql.pages import Page

# the openings of real pages (the Debian handbook and Python's docs), English and Chinese
ENGLISH = [
    "Debian is a free operating system, developed and maintained by volunteers. The "
    "packages are built from source and tested before a stable release.",
    "The logging module defines functions and classes which implement a flexible event "
    "logging system for applications and libraries.",
    "Setting up the network: the interfaces file describes the network interfaces "
    "available on the system and how to activate them.",
]
CHINESE = [
    "Debian 是一个自由的操作系统，由志愿者开发和维护。软件包从源代码构建，并在稳定版发布前测试。",
    "日志模块定义了为应用程序和库实现灵活的事件日志系统的函数和类。",
    "配置网络：interfaces 文件描述了系统上可用的网络接口以及如何启用它们。",
]
DAY = 86_400


def at(year: int, month: int, day: int) -> float:
    return datetime(year, month, day, 12, tzinfo=UTC).timestamp()


def test_a_page_s_language_is_named_from_its_title_and_text() -> None:
    for text in ENGLISH:
        assert detect_language("", text) == "en"
    for text in CHINESE:
        assert detect_language("", text) == "zh"
    # a Chinese title around English names: Chinese (the model alone says Japanese)
    assert detect_language("Debian 管理员手册 The Debian Administrator Handbook", "") == "zh"
    assert detect_language("Der Debian-Systemverwalter", "Ein Handbuch für Debian") == "de"
    assert detect_language("", "") == "und"
    assert detect_language("404", "12345 -- 678") == "und"


def test_an_index_slave_s_models_log_nothing_for_each_page() -> None:
    # the embedding model's import set the root logger to INFO, and the language model
    # logged each text it cut: an index slave's log had a line for every page
    script = (
        "import logging\n"
        "from srcrawl.indexer.slave import IndexHandler\n"
        "from srcrawl.indexer.search import meaning\n"
        "from srcrawl.indexer.language import detect_language\n"
        "assert meaning.available()\n"
        f"assert detect_language('', {ENGLISH[0]!r} * 4) == 'en'\n"
        f"assert detect_language('', {CHINESE[0]!r} * 4) == 'zh'\n"
        "logging.getLogger('srcrawl.any').info('an INFO record: not shown')\n"
        "root = logging.getLogger()\n"
        "print(root.level, len(root.handlers))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == [str(logging.WARNING), "0"], done.stdout
    assert done.stderr == "", done.stderr


def test_a_page_s_language_travels_from_the_slave_and_an_older_slave_s_has_none() -> None:
    doc = IndexDoc(7, 1.0, "h", "标题", "正文", lang="zh", meaning="AAE=")
    assert unpack(pack([doc])) == [doc]
    row = orjson.loads(pack([doc]))[0]
    before_vector = unpack(orjson.dumps([row[:-1]]))[0]  # a slave from before the vectors
    assert (before_vector.lang, before_vector.meaning) == ("zh", "")
    before_language = unpack(orjson.dumps([row[:-2]]))[0]  # and before the language
    assert (before_language.lang, before_language.meaning) == ("und", "")
    for bad in ("not base64!", "A" * 8000):  # the master trusts the format, not the sender
        with pytest.raises(DocumentsFormatError, match="vector"):
            unpack(orjson.dumps([[*row[:-1], bad]]))


def the_web() -> list[Page]:
    """Pages of three hosts in English and Chinese, fetched over three months: each says
    ``tesseract``, its text distinct enough not to be folded into another's."""
    pages = []
    now = datetime.now(UTC)
    months = [(now.year, now.month)]
    for _ in range(2):
        y, m = months[-1]
        months.append((y - 1, 12) if m == 1 else (y, m - 1))
    for i in range(18):
        host = ["docs.example.com:9", "wiki.example.org:9", "blog.example.net:9"][i % 3]
        lang = "en" if i % 2 else "zh"
        # each text once a host: none is on half of its pages (its boilerplate)
        text = (ENGLISH if lang == "en" else CHINESE)[(i // 3) % 3]
        year, month = months[i % 3 if i < 12 else 0]
        url = f"http://{host}/page-{i}"
        pages.append(
            Page(
                fp=fingerprint(url),
                url=url,
                host=host,
                fetched_at=at(year, month, 1 + i),
                title=f"tesseract {i} {'notes' if lang == 'en' else '笔记'}",
                text=f"{text} tesseract {i} " + " ".join(f"w{i}x{j}" for j in range(40)),
            )
        )
    return pages


def facets_by_hand(pages: list[Page], langs: dict[int, str]) -> dict:
    """The facets counted page by page (as Searcher counts them over its matches)."""
    months = Counter(datetime.fromtimestamp(p.fetched_at, UTC).strftime("%Y-%m") for p in pages)
    return {
        "lang": Counter(langs[p.fp] for p in pages),
        "site": Counter(p.host for p in pages),
        "month": months,
    }


def as_counters(facets) -> dict:
    out = facets.as_json()
    return {name: Counter({b["value"]: b["count"] for b in out[name]}) for name in out}


@pytest.fixture
def web(store, tmp_path) -> tuple[Searcher, list[Page], dict[int, str]]:
    pages = the_web()
    store.put_pages(pages)
    index_in_process(store, tmp_path / "index")
    langs = {p.fp: detect_language(p.title, p.text) for p in pages}
    assert set(langs.values()) == {"en", "zh"}
    return Searcher(store, tmp_path / "index"), pages, langs


def found(searcher: Searcher, query: str) -> set[str]:
    return {h.url for h in searcher.search(query, top=100).hits} | {
        u for h in searcher.search(query, top=100).hits for u in h.similar_urls
    }


def test_filters_keep_the_pages_of_a_language_a_site_and_fetch_days(web) -> None:
    searcher, pages, langs = web
    assert found(searcher, "tesseract") == {p.url for p in pages}
    assert found(searcher, "tesseract lang:zh") == {p.url for p in pages if langs[p.fp] == "zh"}
    assert found(searcher, "tesseract -lang:zh") == {p.url for p in pages if langs[p.fp] != "zh"}
    assert found(searcher, "tesseract lang:en site:wiki.example.org") == {
        p.url for p in pages if langs[p.fp] == "en" and p.host.startswith("wiki.")
    }
    day = datetime.fromtimestamp(pages[4].fetched_at, UTC).date().isoformat()
    assert found(searcher, f"tesseract since:{day} until:{day}") == {
        p.url for p in pages if datetime.fromtimestamp(p.fetched_at, UTC).date().isoformat() == day
    }
    since = sorted(p.fetched_at for p in pages)[9]
    first = datetime.fromtimestamp(since, UTC).date().isoformat()
    assert found(searcher, f"lang:zh since:{first}") == {
        p.url for p in pages if langs[p.fp] == "zh" and p.fetched_at >= since - 12 * 3600
    }


def test_facets_count_every_matching_page_not_only_those_shown(web) -> None:
    searcher, pages, langs = web
    for query, keep in [
        ("tesseract", lambda p: True),
        ("tesseract lang:en", lambda p: langs[p.fp] == "en"),
        ("notes", lambda p: langs[p.fp] == "en"),  # (in the English titles only)
        ("tesseract site:blog.example.net", lambda p: p.host.startswith("blog.")),
    ]:
        result = searcher.search(query, top=2, facets=True)
        assert len(result.hits) == 2
        matching = [p for p in pages if keep(p)]
        assert as_counters(result.facets) == facets_by_hand(matching, langs), query
    assert searcher.search("tesseract").facets is None  # counted only when asked
    assert searcher.search("nosuchword", facets=True).facets.as_json() == {
        "lang": [],
        "site": [],
        "month": [],
    }


def test_a_month_s_facet_names_its_first_and_last_day(web) -> None:
    searcher, _pages, _langs = web
    months = searcher.search("tesseract", facets=True).facets.months
    assert [m.label for m in months] == sorted((m.label for m in months), reverse=True)
    for m in months:
        assert m.since == f"{m.label}-01" and m.until.startswith(m.label)
        narrowed = searcher.search(f"tesseract since:{m.since} until:{m.until}", facets=True)
        assert sum(n for _lang, n in narrowed.facets.langs) == m.count


@pytest.mark.parametrize(
    "query, said",
    [
        ("tesseract lang:english", "lang: takes a language code"),
        ("tesseract since:yesterday", "since: takes a day as YYYY-MM-DD"),
        ("tesseract until:2026-02-30", "until: takes a day as YYYY-MM-DD"),
        ("tesseract -since:2026-01-01", "cannot be left out"),
    ],
)
def test_a_filter_that_is_not_one_is_told(web, query, said) -> None:
    searcher, _pages, _langs = web
    with pytest.raises(FilterError, match=said):
        searcher.search(query)


def test_a_language_no_page_is_in_is_named(web) -> None:
    searcher, _pages, _langs = web
    result = searcher.search("tesseract lang:xx", facets=True)
    assert result.hits == [] and result.mode == "none"
    assert any("no page is in the language «xx»" in n for n in result.notes)


def test_an_index_built_before_the_facet_fields_is_searched_without_them(
    store, tmp_path, monkeypatch
) -> None:
    pages = the_web()
    store.put_pages(pages)
    old = tmp_path / "old-index"
    built = engine.schema
    monkeypatch.setattr(engine, "schema", lambda: built(facets=False))
    index_in_process(store, old, [p.fp for p in pages[1:]])
    monkeypatch.undo()
    index_in_process(store, old, [pages[0].fp])  # written to since, as it is
    searcher = Searcher(store, old)
    assert not searcher.reader.has_facets
    result = searcher.search("tesseract", top=100, facets=True)
    assert result.facets is None and len(result.hits) + sum(h.similar for h in result.hits) == 18
    with pytest.raises(FilterError, match="built before pages' languages"):
        searcher.search("tesseract lang:zh")
    assert not engine.has_facets(tantivy.Index.open(str(old)))  # (its schema kept)
