"""The search box's completions: the prefix lists (indexer/search/completion.py) over a real
Tantivy index, ``/api/suggest`` over HTTP from a real uvicorn server, and the combobox
(portal/static/suggest.js) in Debian's Chromium driven by Playwright."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from tantivy_index import index_in_process

from srcrawl.core.urls import fingerprint
from srcrawl.indexer.search.completion import Completions, build
from srcrawl.indexer.tokenizer import get_tokenizer
from srcrawl.portal.schemas import API_VERSION
from srcrawl.portal.server import build_portal, serving_in_thread
from srcrawl.portal.suggest import Suggester
from srcrawl.settings.config import Config
from srcrawl.sql.pages import Page

from .conftest import cli_env

# (title, text): "vacuum" is in one title and six bodies, "vacation" in two titles and
# their two bodies only; the stems villag and databa are no words
PAGES = [
    ("Vacuum tuning for PostgreSQL", "vacuum autovacuum tuning"),
    ("Vacation rentals", "vacation by the sea"),
    ("Vacation rentals", "vacation in the hills"),
    ("Village notes", "villages met"),
    ("Villages of the north", "village elders"),
    ("数据库连接池配置", "数据库连接池"),
    ("数据库索引", "数据库索引"),
    ("Zeta index", "zetaa zetab"),
] + [(f"Page {w}", f"vacuum {w} {w}") for w in ("alpha", "bravo", "charlie", "delta", "echo")]
ZETA = [f"zeta{c}" for c in "abcdefghijkl"]  # twelve words of one prefix: more than shown


def _store(cfg: Config) -> None:
    pages = [
        Page(
            fingerprint(f"http://127.0.0.1:9/{i}"),
            f"http://127.0.0.1:9/{i}",
            "127.0.0.1:9",
            status=200,
            fetched_at=1.0,
            title=title,
            text=text,
        )
        for i, (title, text) in enumerate(PAGES)
    ]
    for j, word in enumerate(ZETA):
        url = f"http://127.0.0.1:9/zeta/{j}"
        pages.append(
            Page(
                fingerprint(url),
                url,
                "127.0.0.1:9",
                status=200,
                fetched_at=1.0,
                title=f"{word} notes",
                text=word,
            )
        )
    cfg.store().put_pages(pages)
    index_in_process(cfg.store(), cfg.index_path)


@pytest.fixture(scope="module")
def indexed(redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    env = cli_env(redis_url, f"t-{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("suggest"))
    cfg = Config.load(env=env)
    _store(cfg)
    yield cfg
    cfg.close()


@pytest.fixture(scope="module")
def portal(indexed):
    return build_portal(indexed, threads=0, admin_token="")


@pytest.fixture(scope="module")
def portal_url(portal):
    with serving_in_thread(portal) as url:
        yield url


def _suggest(url: str, **params) -> requests.Response:
    return requests.get(url.rstrip("/") + "/api/suggest", params=params, timeout=30)


def _completions(cfg: Config) -> Completions:
    from srcrawl.indexer.engine import IndexReader

    reader = IndexReader(cfg.index_path)
    return build(reader.searcher(), cfg.store().some_titles(1000), get_tokenizer())


# -- the prefix lists ---------------------------------------------------------------
def test_words_are_ranked_by_the_pages_that_hold_them_and_keep_what_was_typed() -> None:
    done = Completions({"vacuum": 6, "vacation": 2, "valve": 9, "apple": 50}, Counter())
    assert done.complete("va") == ["valve", "vacuum", "vacation"]
    assert done.complete("Postgres VAC") == ["Postgres vacuum", "Postgres vacation"]
    assert done.complete("vac", limit=1) == ["vacuum"]
    assert done.complete("vacuum") == []  # nothing more than what is typed
    assert done.complete("xyz") == []


def test_titles_complete_the_whole_prefix_and_lead_once_two_words_are_typed() -> None:
    titles = Counter({"Vacuum tuning for PostgreSQL": 1, "vacuum TUNING for postgresql": 2})
    done = Completions({"vacuum": 6, "tuning": 3, "tune": 1}, titles)
    # one title for both spellings, the more frequent one shown
    assert done.complete("vacuum tu") == [
        "vacuum TUNING for postgresql",
        "vacuum tuning",
        "vacuum tune",
    ]
    assert done.complete("vac") == ["vacuum", "vacuum TUNING for postgresql"]


@pytest.mark.parametrize(
    "odd", ["", "   ", "-", "!!!", "site:vac", '"', "\x00", "%zz", "vac ", "a" * 5000]
)
def test_odd_input_gets_an_empty_list(odd: str) -> None:
    done = Completions({"vacuum": 6, "site": 3}, Counter({"Vacuum": 1}))
    assert done.complete(odd) == []


def test_surface_words_of_titles_weighed_by_the_index(indexed) -> None:
    done = _completions(indexed)
    # vacuum: one title, six bodies; vacation: two titles, two bodies
    assert done.complete("vac")[:2] == ["vacuum", "vacation"]
    shown = done.complete("vill")
    assert set(shown) >= {"village", "villages"} and "villag" not in shown
    assert "databa" not in done.complete("datab")


def test_chinese_words_complete_inside_a_run_typed_without_spaces(indexed) -> None:
    done = _completions(indexed)
    assert "数据库" in done.complete("数据")
    # the last word of a run is its longest tail some word starts with
    assert "我想数据库" in done.complete("我想数据")
    assert "数据库连接池配置" in done.complete("数据库连")  # a whole title


def test_a_new_commit_is_built_anew(indexed, tmp_path) -> None:
    portal = build_portal(indexed, threads=0, admin_token="")
    suggester = Suggester(portal.pool, rebuild_every=0)
    try:
        assert asyncio.run(suggester.suggest("quag")) == []
        url = "http://127.0.0.1:9/quagga"
        page = Page(
            fingerprint(url),
            url,
            "127.0.0.1:9",
            status=200,
            fetched_at=1.0,
            title="Quagga routing",
            text="quagga",
        )
        indexed.store().put_pages([page])
        index_in_process(indexed.store(), indexed.index_path, [page.fp])
        portal.pool.reader.reload()
        deadline = time.monotonic() + 20
        while (found := asyncio.run(suggester.suggest("quag"))) == []:
            assert time.monotonic() < deadline, "the new commit's words never came"
            time.sleep(0.05)
        assert found[0] == "quagga"
    finally:
        portal.pool.close()


# -- over HTTP ---------------------------------------------------------------------
def test_api_suggest_answers_json_of_at_most_eight(portal_url) -> None:
    r = _suggest(portal_url, q="zeta")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == {"q", "suggestions"} and body["q"] == "zeta"
    assert len(body["suggestions"]) == 8 and all(
        s.lower().startswith("zeta") for s in body["suggestions"]
    )
    long = "zeta " * 30
    cut = _suggest(portal_url, q=long).json()
    assert cut["q"] == long[:64]


@pytest.mark.parametrize(
    "params", [{}, {"q": ""}, {"q": "   "}, {"q": "\x00\x01"}, {"q": "%%%"}, {"q": "x" * 10_000}]
)
def test_api_suggest_gives_odd_input_an_empty_list(portal_url, params) -> None:
    r = _suggest(portal_url, **params)
    assert r.status_code == 200, r.text
    assert r.json()["suggestions"] == []


def test_api_suggest_is_in_the_openapi_document(portal_url) -> None:
    doc = requests.get(portal_url + "openapi.json", timeout=10).json()
    assert doc["info"]["version"] == API_VERSION == "0.6.0"
    get = doc["paths"]["/api/suggest"]["get"]
    schema = get["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/SuggestOut")
    assert set(doc["components"]["schemas"]["SuggestOut"]["properties"]) == {"q", "suggestions"}


# -- in a real browser -------------------------------------------------------------


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    page = context.new_page()
    # what the policy refuses, as the page's own event tells it
    page.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation',"
        " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
    )
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    assert errors == [] and page.evaluate("window.__csp") == [], errors
    context.close()


@pytest.mark.slow
def test_arrow_down_and_enter_search_the_chosen_completion(portal_url, page) -> None:
    page.goto(portal_url)
    box = page.locator("input[name=q]")
    assert box.get_attribute("role") == "combobox" and box.get_attribute("aria-expanded") == "false"
    box.press_sequentially("vac", delay=30)
    options = page.locator("#suggestions [role=option]")
    options.first.wait_for()
    assert box.get_attribute("aria-expanded") == "true"
    assert options.all_inner_texts()[:2] == ["vacuum", "vacation"]
    box.press("ArrowDown")
    assert box.get_attribute("aria-activedescendant") == options.first.get_attribute("id")
    assert options.first.get_attribute("aria-selected") == "true"
    assert box.input_value() == "vacuum"
    with page.expect_navigation():
        box.press("Enter")
    assert parse_qs(urlsplit(page.url).query)["q"] == ["vacuum"]
    assert box.input_value() == "vacuum" and page.locator("li.hit").count() >= 2  # searched


@pytest.mark.slow
def test_escape_closes_the_list_and_gives_back_what_was_typed(portal_url, page) -> None:
    page.goto(portal_url)
    box = page.locator("input[name=q]")
    box.press_sequentially("vill", delay=30)
    page.locator("#suggestions [role=option]").first.wait_for()
    box.press("ArrowDown")
    box.press("Escape")
    assert page.locator("#suggestions").is_hidden()
    assert box.get_attribute("aria-expanded") == "false"
    assert box.get_attribute("aria-activedescendant") is None
    assert box.input_value() == "vill"
    # without the script the box is a plain form: Enter searches what is typed
    with page.expect_navigation():
        box.press("Enter")
    assert parse_qs(urlsplit(page.url).query)["q"] == ["vill"]


def test_the_bench_asks_each_keystroke_s_completions() -> None:
    from srcrawl.benchmarks.serve import request_paths

    assert request_paths("suggest", ["ab c"]) == [
        "/api/suggest?q=a",
        "/api/suggest?q=ab",
        "/api/suggest?q=ab+",
        "/api/suggest?q=ab+c",
    ]
    assert request_paths("search", ["ab c"]) == ["/api/search?q=ab+c"]


@pytest.mark.slow
def test_without_script_the_box_is_a_plain_search_form(browser, portal_url) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(portal_url)
        box = page.locator("input[name=q]")
        assert box.get_attribute("role") is None and page.locator("#suggestions").count() == 0
        box.fill("vacuum")
        with page.expect_navigation():
            box.press("Enter")
        assert page.locator("li.hit").count() >= 2
    finally:
        context.close()
