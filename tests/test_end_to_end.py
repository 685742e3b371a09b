"""Crawl → index → rank → search over the synthetic web, as a user runs it."""

from __future__ import annotations

import json
import random

import pytest

from srcrawl.indexer.search import Searcher
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb

from .test_crawl import POLITE, env_for, srcrawl, stored


@pytest.mark.slow
def test_known_items_come_first_after_crawl_index_and_rank(redis_url, keys, tmp_path) -> None:
    with TestWeb.generate(hosts=3, pages=40, seed=21, slow_seconds=2, large_bytes=500_000) as web:
        env = env_for(redis_url, keys.job, tmp_path)
        r = srcrawl(["crawl", *web.seed_urls, "--depth", "3", "--slaves", "2", *POLITE], env)
        assert r.returncode == 0, r.stderr[-2000:]
    crawled = {p["url"] for p in stored(env)}
    r = srcrawl(["index", "--slaves", "2", "--json"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["indexed"] > 0
    r = srcrawl(["pagerank", "--iterations", "20", "--slaves", "1"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    items = web.web.known_items(within=crawled)
    assert len(items) > 40
    query, url = items[0]
    r = srcrawl(["search", query, "--top", "3", "--json"], env)
    assert r.returncode == 0, (query, r.stderr)
    hits = json.loads(r.stdout)
    assert hits and hits[0]["url"] == url, (query, url, hits[:2])
    # the rest in this process: one jieba start-up instead of one per query
    cfg = Config.load(env=env)
    searcher = Searcher(cfg.store(), cfg.index_path)
    for query, url in random.Random(3).sample(items, 40):
        result = searcher.search(query, top=3)
        assert result.ranked  # PageRank is blended in
        assert result.hits and result.hits[0].url == url, (query, url, result.hits[:2])
    cfg.close()
