"""The Scrapy peer of `bench crawl --peer scrapy` on a tiny synthetic web: the pages a
correct crawl fetches, and one request in flight per host:port."""

from __future__ import annotations

import itertools
from collections import defaultdict
from urllib.parse import urlsplit

import pytest

from srcrawl.benchmarks.scrapy_peer import run_scrapy_peer
from srcrawl.testweb import TestWeb
from srcrawl.testweb.expected import expected_crawl
from srcrawl.testweb.urls import canonical

pytestmark = pytest.mark.slow  # every test here runs for more than a second


def test_scrapy_peer_fetches_the_expected_pages_politely(tmp_path) -> None:
    log = tmp_path / "access.jsonl"
    with TestWeb.generate(
        hosts=4,
        pages=15,
        seed=3,
        latency_ms=20,
        slow_seconds=2,
        robots_failures=0,
        crawl_delay=0,
        large_bytes=100_000,
        access_log=log,
        flush_interval=0.1,
    ) as web:
        seeds = web.seed_urls[1:]  # as the benchmark: host 0 holds the timeout and trap cases
        scope = {urlsplit(s).netloc for s in seeds}
        for depth in (1, 20):
            expected = expected_crawl(
                web.web, seeds, depth, allowed=lambda url: urlsplit(url).netloc in scope
            )
            run = run_scrapy_peer(seeds, depth=depth, concurrency=6, timeout=5, list_urls=True)
            assert run.pages == len(expected), depth
            assert {canonical(u) for u in run.urls} == set(expected), depth
            assert run.disallowed > 0  # robots.txt was obeyed: /private/ is linked, not fetched
            assert run.cpu_s > 0 and run.seconds > 0 and run.concurrency == 6
        entries = web.log_entries()
    assert len(expected) > 3 * 15  # the whole web of the three hosts, with depth 20
    by_host = defaultdict(list)
    for e in entries:
        by_host[e["host"]].append((e["start_mono"], e["end_mono"]))
    assert len(by_host) == 3  # host 0 was never requested
    overlapping = 0
    for spans in by_host.values():
        spans.sort()
        overlapping += sum(b[0] < a[1] for a, b in itertools.pairwise(spans))
    assert overlapping == 0  # one request in flight per host:port, though all are 127.0.0.1
