"""The portal's filters and counts: ``lang=``, ``site=``, ``since=``, ``until=`` in the
API, its ``facets``, and the results page's facet links (plain links) in a real headless
browser. The pages: English and Chinese texts on two hosts, fetched in two months,
indexed by `srcrawl index` (its slaves name each page's language)."""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime

import pytest
import requests

from srcrawl.core.urls import fingerprint
from srcrawl.portal.schemas import API_VERSION
from srcrawl.portal.server import build_portal, serving_in_thread
from srcrawl.settings.config import Config
from srcrawl.sql.pages import Page

from .conftest import cli_env, run_cli
from .test_portal import page  # noqa: F401 (a fixture; browser is a plugin of conftest)
from .test_search_facets import CHINESE, ENGLISH

WORD = "tesseract"
HOSTS = ("docs.example.com:9", "wiki.example.org:9")


def _pages() -> list[Page]:
    now = time.time()
    pages = []
    for i in range(12):
        host = HOSTS[i % 2]
        english = i % 3 != 0  # 8 English pages, 4 Chinese
        text = (ENGLISH if english else CHINESE)[i % 3]
        url = f"http://{host}/p{i}"
        pages.append(
            Page(
                fp=fingerprint(url),
                url=url,
                host=host,
                status=200,
                fetched_at=now - (40 * 86_400 if i % 4 == 0 else 0),
                title=f"{WORD} {i}",
                text=f"{text} {WORD} {i} " + " ".join(f"v{i}y{j}" for j in range(40)),
            )
        )
    return pages


@pytest.fixture(scope="module")
def served(redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    env = cli_env(redis_url, f"f-{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("facets"))
    cfg = Config.load(env=env)
    cfg.store().put_pages(_pages())
    run = run_cli(["index", "--slaves", "1", "--json"], env)
    assert run.returncode == 0, run.stderr[-2000:]
    with serving_in_thread(build_portal(cfg, threads=2, admin_token="")) as url:
        yield url
    cfg.close()


def _api(url: str, **params) -> requests.Response:
    return requests.get(url.rstrip("/") + "/api/search", params=params, timeout=30)


def test_the_api_counts_by_language_site_and_month_and_filters_by_them(served) -> None:
    whole = _api(served, q=WORD, size=2).json()
    facets = whole["facets"]
    assert len(whole["hits"]) == 2 and whole["matches"] == 12
    assert {b["value"]: b["count"] for b in facets["lang"]} == {"en": 8, "zh": 4}
    assert {b["value"]: b["count"] for b in facets["site"]} == {HOSTS[0]: 6, HOSTS[1]: 6}
    assert sum(b["count"] for b in facets["month"]) == 12
    # each count is what its filter finds
    for bucket in facets["lang"]:
        narrowed = _api(served, q=WORD, lang=bucket["value"]).json()
        assert narrowed["matches"] == bucket["count"]
        assert narrowed["facets"]["lang"] == [bucket]
    for bucket in facets["site"]:
        assert _api(served, q=WORD, site=bucket["value"]).json()["matches"] == bucket["count"]
    for bucket in facets["month"]:
        got = _api(served, q=WORD, since=bucket["since"], until=bucket["until"]).json()
        assert got["matches"] == bucket["count"]
    both = _api(served, q=f"{WORD} lang:zh", site=HOSTS[0]).json()
    assert both["matches"] == 2  # p0, p6
    today = datetime.now(UTC).date().isoformat()
    assert _api(served, q=WORD, since=today).json()["matches"] == 9


@pytest.mark.parametrize(
    "params, said",
    [
        ({"lang": "english"}, "lang: takes a language code"),
        ({"since": "garbage"}, "since= takes a day as YYYY-MM-DD"),
        ({"until": "2026-13-01"}, "until= takes a day"),
        ({"site": "a b"}, "site= takes one value"),
        ({"q": f"{WORD} since:soon"}, "since: takes a day"),
    ],
)
def test_a_filter_that_is_not_one_is_a_422_that_says_why(served, params, said) -> None:
    r = _api(served, **{"q": WORD, **params})
    assert r.status_code == 422 and said in r.json()["error"]


def test_a_language_without_pages_is_named_and_the_version_is_0_6(served) -> None:
    r = _api(served, q=WORD, lang="xx")
    assert r.status_code == 200 and r.json()["matches"] == 0
    assert any("no page is in the language «xx»" in n for n in r.json()["notes"])
    assert API_VERSION == "0.6.0"
    spec = requests.get(served.rstrip("/") + "/openapi.json", timeout=30).json()
    assert spec["info"]["version"] == "0.6.0"
    names = {p["name"] for p in spec["paths"]["/api/search"]["get"]["parameters"]}
    assert {"lang", "site", "since", "until"} <= names
    assert "facets" in spec["components"]["schemas"]["SearchOut"]["properties"]


@pytest.mark.slow
def test_a_facet_link_narrows_the_results_and_its_filter_can_be_removed(served, page) -> None:  # noqa: F811
    page.goto(served + f"?q={WORD}")
    page.wait_for_selector("#facets")
    assert page.locator("#summary").inner_text().startswith("12 pages")
    chinese = page.locator('#facet-lang a[data-filter="lang:zh"]')
    assert chinese.inner_text() == "中文"
    chinese.click()
    page.wait_for_url(re.compile(r"lang%3Azh"))
    assert page.locator("#summary").inner_text().startswith("4 pages")
    assert page.locator("li.hit").count() == 4
    assert page.locator("#filters .filter").inner_text().startswith("lang:zh")
    assert page.locator("#facet-lang .current").inner_text() == "中文"  # no link: it is on
    page.locator(f'#facet-site a[data-filter="site:{HOSTS[0]}"]').click()
    page.wait_for_url(re.compile(r"site%3A"))
    assert page.locator("#summary").inner_text().startswith("2 pages")
    page.locator("#filters a.remove").first.click()  # lang:zh off, site: kept
    page.wait_for_selector("#filters")
    assert page.locator("#filters .filter").count() == 1
    assert page.locator("#summary").inner_text().startswith("6 pages")
    assert page.input_value("input[name=q]") == f"{WORD} site:{HOSTS[0]}"
