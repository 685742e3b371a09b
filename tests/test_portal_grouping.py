"""Results grouped by host (portal/grouping.py) over an indexed web where one host holds
most of the pages a word is on: the first page shows two of it and a "more from" link,
the pages passed over lead the second page, each page is listed once and the counts
add up; a page mirrored on two hosts is folded into one hit."""

from __future__ import annotations

import random
import re
import uuid
from urllib.parse import urlencode

import pytest

from srcrawl.core.urls import fingerprint
from srcrawl.indexer.search.hits import Hit
from srcrawl.indexer.search.snippets import Snippet
from srcrawl.portal.grouping import PER_HOST, fold_near_identical, near_identical
from srcrawl.portal.markup import query_string
from srcrawl.portal.server import build_portal
from srcrawl.settings.config import Config
from srcrawl.sql.pages import Page

from .conftest import cli_env, run_cli

WORD = "zyxwvgroup"
BIG = "big.test"
SMALL = ["one.test", "two.test", "three.test"]
MIRRORS = ["mirror-a.test", "mirror-b.test"]
BIG_PAGES = 12


def _filler(rng: random.Random, n: int = 80) -> str:
    """Words of no other page: bodies far apart, so no two pages are folded as duplicates."""
    return " ".join(f"w{rng.randrange(10**6)}x" for _ in range(n))


def _pages() -> list[Page]:
    rng = random.Random(7)
    pages = []

    def page(host: str, path: str, title: str, text: str) -> None:
        url = f"http://{host}/{path}"
        pages.append(Page(fingerprint(url), url, host, status=200, title=title, text=text))

    for i in range(BIG_PAGES):  # the word often: the big host ranks first
        page(BIG, f"p{i}.html", f"Big page {i}", f"{WORD} {WORD} {WORD} {_filler(rng)} {WORD}")
    for host in SMALL:
        for i in range(2):
            page(host, f"p{i}.html", f"{host} page {i}", f"{_filler(rng, 40)} {WORD} {WORD}")
    shared = f"{WORD} the mirrored article that two hosts carry word for word: {_filler(rng, 60)}"
    for host in MIRRORS:  # the same article, each host's own menu around it
        page(host, "article.html", "The mirrored article", f"{shared} {_filler(rng, 300)}")
    return pages


@pytest.fixture(scope="module")
def pool(redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    env = cli_env(redis_url, f"t-{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("grouping"))
    cfg = Config.load(env=env)
    cfg.store().put_pages(_pages())
    run = run_cli(["index", "--slaves", "1"], env)
    assert run.returncode == 0, run.stderr[-2000:]
    portal = build_portal(cfg, threads=0)
    yield portal.pool
    portal.pool.close()
    cfg.close()


def _host(url: str) -> str:
    return re.match(r"https?://([^/]+)", url).group(1)


@pytest.mark.slow
def test_one_host_shows_twice_on_the_first_page_the_rest_behind_its_link(pool) -> None:
    first = pool.search(WORD, 1, 10).as_json()
    total = BIG_PAGES + 2 * len(SMALL) + len(MIRRORS)
    assert first["matches"] == total and first["pages"] == 2
    hosts = [h["host"] for h in first["hits"]]
    assert hosts.count(BIG) == PER_HOST and hosts[0] == BIG  # it ranks first, twice only
    assert all(hosts.count(h) == 2 for h in SMALL)
    # the mirrored article: listed once, the other copy one of its similar pages
    mirrored = [h for h in first["hits"] if h["title"] == "The mirrored article"]
    assert len(mirrored) == 1 and mirrored[0]["similar"] == 1
    copies = {mirrored[0]["url"], *mirrored[0]["similar_urls"]}
    assert len(mirrored[0]["similar_urls"]) == 1
    assert copies == {f"http://{host}/article.html" for host in MIRRORS}
    # the big host's last hit on the page carries what was passed over
    more = {h["url"]: h["host_more"] for h in first["hits"] if h["host_more"]}
    last_big = [h["url"] for h in first["hits"] if h["host"] == BIG][-1]
    assert more == {last_big: BIG_PAGES - PER_HOST}
    # the second page: the passed over, in rank order; every page listed once, and the
    # listed hits with their similar pages are the pages matched
    second = pool.search(WORD, 2, 10).as_json()
    assert [h["host"] for h in second["hits"]] == [BIG] * (BIG_PAGES - PER_HOST)
    scores = [h["score"] for h in second["hits"]]
    assert scores == sorted(scores, reverse=True)
    listed = [h for p in (first, second) for h in p["hits"]]
    urls = [h["url"] for h in listed] + [u for h in listed for u in h["similar_urls"]]
    assert len(urls) == len(set(urls)) == total
    assert sum(1 + h["similar"] for h in listed) == first["matches"]
    # the link's search: that host's pages only, not grouped
    within = pool.search(f"site:{BIG} {WORD}", 1, 20).as_json()
    assert within["matches"] == BIG_PAGES == len(within["hits"])
    assert {h["host"] for h in within["hits"]} == {BIG}
    assert not any(h["host_more"] for h in within["hits"])


@pytest.mark.slow
def test_the_search_page_links_to_more_from_the_host(pool) -> None:
    from srcrawl.portal.app import _templates
    from srcrawl.portal.markup import page_links

    found = pool.search(WORD, 1, 10)
    html = (
        _templates()
        .get_template("search.html")
        .render(query=WORD, found=found, links=page_links(1, found.pages), max_chars=256)
    )
    more = re.findall(
        r'<div class="more-host"><a href="([^"]+)" data-host="([^"]+)">([^<]+)</a>', html
    )
    assert more == [(f"/?q=site%3A{BIG}+{WORD}", BIG, f"{BIG_PAGES - PER_HOST} more from {BIG}")]
    assert html.count('class="stored-link"') == len(found.hits)
    assert "1 similar page<" in html


def _hit(url: str, title: str, text: str) -> Hit:
    return Hit(url, title, 1.0, Snippet(text), fingerprint(url))


def test_near_identical_means_the_same_title_and_nearly_the_same_snippet() -> None:
    a = _hit("http://a.test/", "Release notes", "version 2 adds grouping of results by host")
    b = _hit("http://b.test/", " release  NOTES", "…version 2 adds grouping of results by host…")
    c = _hit("http://c.test/", "Release notes", "version 3 removes the old index format")
    d = _hit("http://d.test/", "Other title", "version 2 adds grouping of results by host")
    assert near_identical(a, b) and not near_identical(a, c) and not near_identical(a, d)
    kept = fold_near_identical([a, c, b, d], {})
    assert kept == [a, c, d] and a.similar == 1 and a.similar_urls == ["http://b.test/"]
    # a hit carrying its host's "more from" link stays listed: its count is its host's
    e = _hit("http://e.test/", "Release notes", "version 2 adds grouping of results by host")
    assert fold_near_identical([a, e], {e.fp: 3}) == [a, e]


def _fold_pairwise(hits: list[Hit], host_more: dict[int, int]) -> list[tuple[str, int]]:
    """The fold by its definition: each hit against every kept one, by near_identical."""
    kept: list[Hit] = []
    for hit in hits:
        same = None
        if not host_more.get(hit.fp):
            same = next((k for k in kept if near_identical(k, hit)), None)
        if same is None:
            kept.append(hit)
        else:
            same.similar += 1 + hit.similar
    return [(k.url, k.similar) for k in kept]


def test_the_fold_is_near_identical_pair_by_pair_on_random_hits() -> None:
    rng = random.Random(5)
    titles = ["Release notes", "release  NOTES ", "Install", "", "安装"]
    words = ["version", "adds", "grouping", "results", "host", "index", "format", "版本", "安装"]
    for _ in range(200):
        made = [
            (f"http://h{i}.test/", rng.choice(titles), " ".join(rng.choices(words, k=6)))
            for i in range(rng.randrange(1, 12))
        ]
        more = {fingerprint(url): 1 for url, _t, _x in made if rng.random() < 0.2}
        want = _fold_pairwise([_hit(*m) for m in made], more)
        assert [
            (k.url, k.similar) for k in fold_near_identical([_hit(*m) for m in made], more)
        ] == want


def test_the_portal_links_quote_as_urlencode_does() -> None:
    rng = random.Random(9)
    alphabet = [chr(c) for c in range(128)] + ["é", "中", "\U0001f600", " ", "+", "%", "&"]
    for _ in range(500):
        params = {k: "".join(rng.choices(alphabet, k=rng.randrange(0, 30))) for k in ("url", "q")}
        assert query_string(params) == urlencode(params)
