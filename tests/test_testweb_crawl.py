"""A small rule-following crawler over the served web finds exactly ``expected_crawl``.

This ties the model to the bytes served: robots.txt, redirects, links in
every kind of page, nofollow, timeouts. The crawler here is the reference
reading of the rules in :mod:`srcrawl.testweb.expected`, not the product's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from pathlib import Path

import lxml.etree
import lxml.html
import pytest
import requests
from protego import Protego

from srcrawl.testweb import TestWeb, canonical, read_access_log
from srcrawl.testweb.traps import is_trap
from srcrawl.testweb.urls import origin_of

pytestmark = pytest.mark.slow  # every test here runs for more than a second

FETCH_TIMEOUT = 0.3


class ReferenceCrawler:
    def __init__(self) -> None:
        self.http = requests.Session()
        self.robots: dict[str, Protego | None] = {}

    def robots_allows(self, url: str) -> bool:
        origin = origin_of(url)
        if origin not in self.robots:
            for _ in range(10):  # 5xx: not yet known, ask again
                r = self.http.get(f"{origin}/robots.txt", timeout=5)
                if r.status_code < 500:
                    break
            self.robots[origin] = Protego.parse(r.text) if r.status_code == 200 else None
        rules = self.robots[origin]
        return rules is None or rules.can_fetch(url, "srcrawl")

    def links(self, url: str) -> list[str]:
        """Fetch ``url``; the canonical URLs to follow from it."""
        try:
            r = self.http.get(url, allow_redirects=False, timeout=FETCH_TIMEOUT)
        except requests.RequestException:
            return []
        if r.is_redirect:
            target = canonical(r.headers["location"], url)
            return [] if target is None else [target]
        if r.status_code != 200 or not r.headers.get("content-type", "").startswith("text/html"):
            return []
        try:
            doc = lxml.html.document_fromstring(r.content)
        except (lxml.etree.ParserError, ValueError):
            return []
        robots_meta = " ".join(doc.xpath("//meta[@name='robots']/@content"))
        if "nofollow" in robots_meta:
            return []
        base = doc.xpath("//base/@href")
        base_url = canonical(base[0], url) if base else url
        out = []
        for el in doc.xpath("//a[@href]|//area[@href]|//frame[@src]|//iframe[@src]|//link[@href]"):
            rel = (el.get("rel") or "").split()
            if "nofollow" in rel or (el.tag == "link" and "next" not in rel):
                continue
            target = canonical(el.get("src") or el.get("href"), base_url)
            if target is not None:
                out.append(target)
        return out

    def crawl(self, seeds: list[str], max_depth: int, allowed: Callable[[str], bool]) -> dict:
        depth: dict[str, int] = {}
        queue: deque[str] = deque()

        def visit(url: str, d: int) -> None:
            if url not in depth and allowed(url) and self.robots_allows(url):
                depth[url] = d
                queue.append(url)

        for seed in seeds:
            visit(seed, 0)
        while queue:
            url = queue.popleft()
            children = self.links(url)
            if depth[url] < max_depth:
                for child in children:
                    visit(child, depth[url] + 1)
        return depth


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("crawl") / "access.jsonl"
    with TestWeb.generate(
        4, 15, seed=21, slow_seconds=1.0, large_bytes=2_000_000, access_log=log
    ) as tw:
        yield tw


def test_reference_crawl_equals_expected_crawl(served: TestWeb) -> None:
    def allowed(url: str) -> bool:
        return not is_trap(url)

    got = ReferenceCrawler().crawl(served.seed_urls, 8, allowed)
    expected = served.web.expected_crawl(served.seed_urls, 8, allowed)
    assert got == expected
    assert len(expected) > 100


def test_reference_crawl_into_the_traps(served: TestWeb) -> None:
    seeds = [served.special["index"]]
    got = ReferenceCrawler().crawl(seeds, 5, lambda url: True)
    assert got == served.web.expected_crawl(seeds, 5)
    assert served.base_url(0) + "/trap/a/a/a/a/a/" in got


def test_access_log_holds_what_the_crawler_fetched(tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    with TestWeb.generate(
        4, 10, seed=5, slow_seconds=0.5, large_bytes=200_000, access_log=log, robots_failures=2
    ) as tw:
        expected = tw.web.expected_crawl(tw.seed_urls, 3, lambda u: not is_trap(u))
        ReferenceCrawler().crawl(tw.seed_urls, 3, lambda u: not is_trap(u))
    entries = read_access_log(log)
    pages = [e for e in entries if e["path"] != "/robots.txt"]
    assert sorted(e["url"] for e in pages) == sorted(expected)
    robots = [(e["host_index"], e["status"]) for e in entries if e["path"] == "/robots.txt"]
    assert sorted(robots) == [(0, 200), (1, 200), (2, 404), (3, 200), (3, 500), (3, 500)]
    for e in pages:
        assert tw.web.robots_allows(e["url"]), "never a disallowed path"
