"""Sitemaps in the crawl: read by the slave that reads robots.txt, seeds for the master.

A real crawl (`srcrawl crawl`, Redis, SQLite) of the test web with sitemaps:
host 0 names an index of a plain and a gzip sitemap in robots.txt, host 2 has
none and serves /sitemap.xml, host 1 is hostile (see srcrawl/testweb/sitemaps.py).
"""

from __future__ import annotations

import json
import time

import pytest

from srcrawl.core.errors import EnvelopeError
from srcrawl.core.urls import fingerprint, host_of
from srcrawl.master.frontier.recrawl import lastmod_of
from srcrawl.queues.crawl_protocol import FetchTask, RobotsFetched, read_outcome
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.envelope import encode
from srcrawl.queues.scope import Scope
from srcrawl.settings.config import Config
from srcrawl.slave.robots import RobotsRules
from srcrawl.testweb import TestWeb
from srcrawl.testweb.sitemaps import OFF_SCOPE

from .conftest import cli_env, logged_requests, run_cli, stored_pages

FAST = [
    "--depth",
    "2",
    "--slaves",
    "1",
    "--delay",
    "0",
    "--delay-factor",
    "0",
    "--max-delay",
    "0",
    "--fetch-timeout",
    "2",
    "--robots-defer",
    "0.2",
    "--retry-backoff",
    "0.1",
]


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    log = tmp_path_factory.mktemp("web") / "access.jsonl"
    with TestWeb.generate(
        hosts=4,
        pages=8,
        seed=11,
        slow_seconds=0.5,
        crawl_delay=0.05,
        robots_failures=1,
        large_bytes=50_000,
        access_log=log,
        sitemaps=True,
        flush_interval=0.1,
    ) as tw:
        yield tw


def expected(tw: TestWeb, *, sitemaps: bool) -> dict[str, int]:
    seeds = tw.seed_urls
    scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=2))
    return tw.web.expected_crawl(
        seeds, 2, lambda url: scope.reject(url, 0) is None, sitemaps=sitemaps
    )


def requests_since(tw: TestWeb, t0: float) -> list[dict]:
    return [e for e in logged_requests(tw) if e["start_mono"] >= t0]


@pytest.mark.slow
def test_a_crawl_seeds_the_pages_of_the_sitemaps_and_nothing_else(
    web, redis_url, keys, tmp_path
) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    t0 = time.monotonic()
    r = run_cli(["crawl", *web.seed_urls, *FAST], env)
    assert r.returncode == 0, r.stderr[-3000:]
    want = expected(web, sitemaps=True)
    pages = {p["url"]: p["depth"] for p in stored_pages(env)}
    assert pages == want  # exactly the reachable set, sitemap pages at depth 0
    o0, o1, o2 = (web.web.hosts[i].origin for i in range(3))
    only_by_sitemap = {
        f"{o0}/sm/0.html",
        f"{o0}/sm/2.html",
        f"{o1}/sm/bomb.html",
        f"{o1}/sm/kept.html",
        f"{o2}/sm/0.html",
    }
    assert only_by_sitemap <= set(pages) and pages[f"{o0}/sm/child.html"] == 1
    assert only_by_sitemap.isdisjoint(expected(web, sitemaps=False))
    assert not any(url.startswith(OFF_SCOPE) for url in pages)

    summary = json.loads(r.stdout)
    # host 1: nested too deep, the bomb and the huge one cut; off scope, another origin
    # and a disallowed sitemap refused; the malformed one with its invalid <loc>
    assert summary["sitemap_capped"] == 3 and summary["sitemap_refused"] == 3
    assert summary["sitemap_malformed"] == 1 and summary["sitemap_invalid_urls"] == 1
    # index, plain, gzip; nested ×3, bomb, huge, malformed; a /sitemap.xml on hosts 2 and 3
    assert summary["sitemaps_fetched"] == 3 + 6 + 2
    assert summary["sitemap_seeds"] >= len(only_by_sitemap)

    asked = requests_since(web, t0)
    files = {e["url"] for e in asked if e["url"] in web.web.files}
    assert files == set(web.web.files) - {f"{o1}/hostile/nested-3.xml"}
    probes = [e for e in asked if e["path"] == "/sitemap.xml"]
    assert sorted((e["host_index"], e["status"]) for e in probes) == [(2, 200), (3, 404)]
    for e in asked:  # nothing but robots.txt, the probes, sitemaps and the expected pages
        polled = e["path"] in ("/robots.txt", "/sitemap.xml")
        assert polled or e["url"] in files or e["url"] in want, e["url"]
        assert e["path"] == "/robots.txt" or web.web.robots_allows(e["url"]), e["url"]

    cfg = Config.load(env=env)
    fps = {url: fingerprint(url) for url in web.web.sitemap_pages[o0]}
    kept = lastmod_of(cfg.redis(), cfg.keys, list(fps.values()))
    assert {url: kept.get(fp) for url, fp in fps.items()} == web.web.sitemap_pages[o0]


@pytest.mark.slow
def test_no_sitemaps_reads_none(web, redis_url, keys, tmp_path) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    t0 = time.monotonic()
    r = run_cli(["crawl", *web.seed_urls, *FAST, "--no-sitemaps"], env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p["url"]: p["depth"] for p in stored_pages(env)} == expected(web, sitemaps=False)
    asked = requests_since(web, t0)
    assert [e["url"] for e in asked if e["url"] in web.web.files or "sitemap" in e["path"]] == []
    assert not any(k.startswith("sitemap") for k in json.loads(r.stdout))


def test_robots_rules_give_their_sitemaps_absolute() -> None:
    text = "User-agent: *\nDisallow: /x\nSitemap: http://a.test/s.xml\nsitemap: /rel.xml\n"
    from protego import Protego

    rules = RobotsRules("http://b.test", "srcrawl", parser=Protego.parse(text))
    assert rules.sitemaps == ["http://a.test/s.xml", "http://b.test/rel.xml"]
    assert RobotsRules("http://b.test", "srcrawl").sitemaps == []


def test_sitemap_entries_travel_checked() -> None:
    task = FetchTask("http://a.test/", fingerprint("http://a.test/"), 0, "a.test")
    url = "http://a.test/sm.html"
    sent = RobotsFetched(
        task, 5.0, None, [(url, fingerprint(url), 1.5e9), (url, 7, None)], {"sitemap_capped": 2}
    )
    got = read_outcome(sent.encode())
    assert got.sitemap == [(url, fingerprint(url), 1.5e9), (url, 7, None)]
    assert got.sitemap_counts == {"sitemap_capped": 2} and got.rejected == 0
    fields = {
        **task.fields(),
        "fetch_ms": 1,
        "sitemap": [["javascript:x", 1, None], [url, 2, "soon"], [url, 3]],
    }
    assert read_outcome(encode("robots", fields)).rejected == 3
    for counts in ({"pages": 1}, {"sitemap_capped": -1}, [1]):
        with pytest.raises(EnvelopeError):
            read_outcome(encode("robots", {**task.fields(), "sitemap_counts": counts}))
